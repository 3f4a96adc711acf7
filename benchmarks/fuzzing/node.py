"""One real tiny node under fuzz: built as ``ftis-node join`` builds it, on the in-memory transport, with its
hostile peers, an honest peer, and the instruments the fuzzer's properties read.

    fuzz = FuzzNode("async")
    fuzz.publish(cases)            # each case listed by its peer (``peers.RawPeer``)
    outcome = fuzz.run_round()     # node.run_round(); an exception out of it is an escape, never raised here
    fuzz.settle()                  # the round's cases served no more

The node (``runner/join.build_node``: tiny-small, arithmetic in the tags format, the inbox limits join sets) runs
its rounds as ``join`` runs them, with helper threads (peers' batches taken and decoded while it generates), so the
whole path a peer's bytes take is fuzzed: ``Inbox.open`` (size and hash, strict decode, the charge, inflating), the
intake (the door, scoring with the task, another tokenizer's texts rebuilt), the mix, and the trainer's step.
``PROFILES`` are the settings it runs under: its defaults where they bound what a peer can cost it, a short round
(one prompt a round, 128 tokens) so that a round is cheap, and room for 256 batches in its inbox so that one round
takes hundreds of cases. The profiles cover the async loop with two solved examples before each prompt (~750
tokens: a shared prefix, groups split across passes); rounds mode with horizontal grouping, trusted peer answers,
a stop string and the rows layout (gradient checkpointing), its deadline short (its hostile peers are live and most
never deliver a batch of its round: each round waits the deadline out); and MATH-500 (math_verify) with trusted
peer answers, on a small local data file.

``passes.py`` counts every forward pass the trainer runs, as ``trainer/packing.py`` bounds them, and the peers
whose groups each one held.
"""

import contextlib
import json
import random
import resource
import tempfile
import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.fuzzing import hostile
from benchmarks.fuzzing.kit import Kit
from benchmarks.fuzzing.passes import Passes, counting_passes, forget, record
from benchmarks.fuzzing.peers import Case, Identities, RawPeer
from ftis.node.config import NodeConfig
from ftis.node.intake.intake import PeerGroups
from ftis.node.intake.text_groups import usable_text_bytes
from ftis.node.records.round_report import RoundReport
from ftis.node.runner.helper_threads import HelperThreads
from ftis.node.runner.join import build_node
from ftis.node.swarm.exchange.limits import inbox_limits
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.node.trainer.logprobs import output_layer
from ftis.protocol import Group

BASE = {"model": {"name": "tiny-small"}, "task": {"name": "arithmetic", "arithmetic": {"format": "tags"}},
        "generation": {"prompts_per_round": 1, "max_new_tokens": 128}, "swarm": {"max_buffered_batches": 256}}
PROFILES: dict[str, dict] = {
    "async": {"task": {"few_shot": 2}},
    "rounds": {"loop": {"mode": "rounds", "grouping": "horizontal", "round_deadline_s": 0.3},
               "task": {"trust_peer_answers": True}, "trainer": {"gradient_checkpointing": True},
               "generation": {"stop": ["</answer>"]}},
    "math500": {"task": {"name": "math500", "split": "train", "trust_peer_answers": True}},
}
MATH500_ROWS = [("What is $\\frac{1}{4} + \\frac{1}{4}$?", "\\frac{1}{2}"), ("Simplify $\\sqrt{52}$.", "2\\sqrt{13}"),
                ("What is $2^{10}$?", "1024"), ("Solve $x + 3 = 5$.", "2"), ("What is $\\pi$ to one decimal?", "3.1"),
                ("Expand $(x+1)^2$.", "x^2+2x+1"), ("What is $0.5 + 0.25$?", "\\frac{3}{4}"), ("What is $7!$?", "5040")]
HONEST_PEER = "honest-peer"
# What the fuzzer reports besides its four properties (``Finding``): a round longer than this...
STALL_S = 30.0
# ...scoring past this many times mix.max_scoring_s (its deadline is checked between groups: one group may overrun)...
SCORING_OVERRUN = 2.0
# ...and a round that raised the process's high-water RSS by more than this: the most a peer's batches may take in
# the inbox (swarm.max_buffered_bytes, 256 MB) several times over.
PEAK_MB = 1024.0


def profile_config(profile: str) -> NodeConfig:
    settings = {section: dict(values) for section, values in BASE.items()}
    for section, values in PROFILES[profile].items():
        settings[section] = {**settings.get(section, {}), **values}
    if settings["task"]["name"] == "math500":
        settings["task"]["data_files"] = {"train": str(_math500_file())}
        settings["task"].pop("arithmetic", None)
    return NodeConfig.model_validate(settings)


def _high_water_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # KiB on Linux


def _math500_file() -> Path:
    path = Path(tempfile.gettempdir()) / "ftis-fuzz-math500.jsonl"
    if not path.exists():
        path.write_text("".join(json.dumps({"problem": q, "answer": a}) + "\n" for q, a in MATH500_ROWS))
    return path


@dataclass(frozen=True)
class Finding:
    """What one round broke: an exception out of ``node.run_round()`` (``"escape"``: the node would have died), a
    forward pass past ``max_tokens_per_microbatch`` (``"oversized_pass"``); and, reported beside the properties, a
    round past ``STALL_S`` (``"stall"``), scoring past ``SCORING_OVERRUN`` × ``mix.max_scoring_s``
    (``"scoring_overrun"``), the process's peak RSS raised by more than ``PEAK_MB`` (``"peak"``)."""

    what: str
    profile: str
    phase: str  # "hostile" (a round of cases) or "honest" (the honest round after one)
    error: str  # an escape's "type: message"; what was measured otherwise
    frames: list[str]  # an escape's traceback, its last frames, innermost last
    cases: list[Case]  # the hostile round's cases
    culprits: frozenset[str] = frozenset()  # a pass past the bound: the peers whose groups it held

    @property
    def signature(self) -> str:
        """An escape's type and where it was raised in the node or protocol (the innermost frame there); the
        property and the profile otherwise."""
        if self.what != "escape":
            return f"{self.what} ({self.profile})"
        ours = [frame for frame in self.frames if "/node/" in frame or "/protocol/" in frame] or self.frames
        return f"{self.error.split(':')[0]} at {ours[-1].splitlines()[0].strip() if ours else '?'}"


@dataclass(frozen=True)
class RoundOutcome:
    report: RoundReport | None  # None: it escaped
    findings: list[Finding]
    seconds: float

    @property
    def escape(self) -> Finding | None:
        return next((finding for finding in self.findings if finding.what == "escape"), None)


class FuzzNode:
    def __init__(self, profile: str, identities: int = 512, clock: Any = time.time):
        """``clock``: the node's inbox's (a reproducer replays a case at the time it was made)."""
        self.profile, self.config = profile, profile_config(profile)
        config = self.config
        self.hub = MemoryHub()
        limits = replace(inbox_limits(config.swarm), max_text_bytes=usable_text_bytes(config.generation.max_new_tokens))
        self.node = build_node(config, lambda fingerprint: MemoryTransport(self.hub, config.swarm.run_id, "node",
                                                                           fingerprint, limits, clock=clock))
        self.passes = Passes(config.trainer.max_tokens_per_microbatch)
        head = output_layer(self.node.policy.model)
        record(self.node.policy.model, head.decoder if head is not None else self.node.policy.model, self.passes)
        self.honest = MemoryTransport(self.hub, config.swarm.run_id, HONEST_PEER, self.node.policy.fingerprint, limits)
        self.identities = Identities(identities)
        self._peers: dict[str, RawPeer] = {}
        self._clock = clock
        self._honest_round = 0
        self.helpers = HelperThreads()
        self.scored: PeerGroups | None = None  # what the last round's intake scored (``Intake.score``'s result)
        score = self.node.intake.score

        def scored(collected: Any) -> PeerGroups:
            self.scored = score(collected)
            return self.scored

        self.node.intake.score = scored
        self.run_round()  # one quiet round: the model's first passes, the task's first problems, behind us

    def kit(self) -> Kit:
        return Kit.of(self.node)

    def publish(self, cases: list[Case]) -> None:
        for case in cases:
            peer = self._peers.get(case.peer_id)
            if peer is None:
                peer = self._peers[case.peer_id] = RawPeer(self.config.swarm.run_id, case.peer_id, self._clock)
                self.hub.join(case.peer_id, peer)
            peer.list(case)
            self.identities.used(case.peer_id, case.round)
        for peer_id in {case.peer_id for case in cases}:
            self.hub.put_raw_announcement(peer_id, self._peers[peer_id].record())

    def publish_honest(self, rng: random.Random) -> None:
        """The honest peer's batch for the node's next round (``hostile.honest_batch``), with the log-probs the node's
        own policy gives its completions now: a peer of the same model, whose samples the filter keeps."""
        self._honest_round = max(self.node.round, self._honest_round + 1)  # rounds mode trains on it this round
        made = hostile.honest_batch(self.kit(), rng, HONEST_PEER, self._honest_round)
        self.honest.publish(replace(made, groups=tuple(self._on_policy(group) for group in made.groups)))

    def _on_policy(self, group: Group) -> Group:
        model = self.node.policy.model
        completions = []
        with torch.no_grad():
            for c in group.completions:
                ids = torch.from_numpy(np.concatenate([group.prompt_ids, c.token_ids]))[None]  # (1, L)
                logits = model(input_ids=ids).logits[0, len(group.prompt_ids) - 1 : -1].float()  # (T, V)
                chosen = torch.log_softmax(logits, dim=-1).gather(-1, torch.from_numpy(c.token_ids)[:, None])
                completions.append(replace(c, sampler_logprobs=chosen[:, 0].numpy()))
        return group.replace(completions=tuple(completions))

    def run_round(self, phase: str = "hostile", cases: list[Case] | None = None) -> RoundOutcome:
        """One round of the node; whatever broke a property in it, as findings (an escape is never raised)."""
        started, high_water = time.perf_counter(), _high_water_mb()
        self.scored = None
        self.passes.over = []
        cases = cases or []
        findings, report = [], None
        try:
            with counting_passes():
                report = self.node.run_round(helpers=self.helpers)
        except Exception as error:
            frames = traceback.format_tb(error.__traceback__)[-6:]
            findings.append(Finding("escape", self.profile, phase, f"{type(error).__name__}: {str(error)[:300]}",
                                    frames, cases))
        seconds = time.perf_counter() - started
        found = self._measured(report, seconds, _high_water_mb() - high_water)
        findings += [Finding(what, self.profile, phase, error, [], cases, culprits) for what, error, culprits in found]
        return RoundOutcome(report, findings, seconds)

    def _measured(self, report: RoundReport | None, seconds: float,
                  rose_mb: float) -> list[tuple[str, str, frozenset[str]]]:
        """(kind, what was measured, culprits) of each bound a round broke besides raising."""
        found = []
        if self.passes.over:
            culprits = frozenset().union(*(over.peers for over in self.passes.over))
            found.append(("oversized_pass", f"forward passes of {[over.tokens for over in self.passes.over]} tokens, "
                          f"bound {self.passes.bound}, holding groups of {sorted(culprits)}", culprits))
        parts = {} if report is None else report.seconds
        if seconds > STALL_S:
            spent = ", ".join(f"{part} {s:.1f} s" for part, s in parts.items() if s >= 1)
            found.append(("stall", f"a round of {seconds:.1f} s ({spent})", frozenset()))
        # the default, where the node under test has no such setting
        limit = getattr(self.config.mix, "max_scoring_s", 10.0)
        if parts.get("score_peers", 0.0) > SCORING_OVERRUN * limit:
            found.append(("scoring_overrun", f"scoring took {parts['score_peers']:.1f} s, mix.max_scoring_s "
                          f"{limit:g}", frozenset()))
        if rose_mb > PEAK_MB:
            found.append(("peak", f"the process's peak RSS rose {rose_mb:,.0f} MB in the round, to "
                          f"{_high_water_mb():,.0f} MB", frozenset()))
        return found

    def settle(self) -> None:
        """The round's cases are served no more: those not fetched (deferred for room) are dropped, as a peer that
        left would leave them, and the harness holds no payload between rounds."""
        for peer_id in self._peers:
            self.hub.leave(peer_id)
        self._peers.clear()

    def rejections(self) -> dict[tuple[str, str], int]:
        return self.node.transport.stats().rejections

    def close(self) -> None:
        forget(self.node.policy.model)
        with contextlib.suppress(Exception):  # a node that escaped may hold a failed publish: the escape is counted
            self.helpers.close()
        self.node.transport.close()
        self.honest.close()
