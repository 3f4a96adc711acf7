"""One node's round: generate its groups, publish them, collect its peers', score everything with its
own task, and take one F-TIS step on its own groups plus a fair mix of its peers' (docs/node.md).

In the default ``async`` mode a round never waits for peers: it trains on whatever has arrived. In
``rounds`` mode it waits, up to ``loop.round_deadline_s``, until every live peer (announced within
its TTL, same tokenizer, not muted) has delivered a batch of this round or a later one, and trains on
the batches of this round and earlier ones (a batch of a later round is held until this node reaches
that round). A live peer that misses a round's deadline is charged for it (``inbox.MISSED_ROUND``), and
one that missed ``MISSED_ROUNDS_IGNORED`` rounds in a row is no longer waited for until it delivers
again: a member that announces itself and never publishes (a ghost) costs a few deadlines, not every
round. A node that finds its peers ahead (it joined late, or restarted) jumps to their round, so the
swarm falls into step; only to a round a strict majority of its live peers have reached, so one peer's
claim of a far-off round moves no node that has other peers. The
model is trained in place, so the next round generates with the weights this round produced, and the
generator's policy version says so.

With ``loop.grouping = "horizontal"`` (rounds mode only) every node draws the round's prompts from the
shared seed and the round number, and a prompt's completions from all nodes form one advantage group
(``horizontal.py`` here and in ``trainer/``); a peer's batch of a later round waits for that round.
"""

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from ftis.node.config import NodeConfig
from ftis.node.generation import Generator
from ftis.node.models import Policy
from ftis.node.runner.horizontal import LaterRounds, shared_group_id, shared_problems
from ftis.node.runner.overlap import Overlap, Texts, batch_key
from ftis.node.runner.prompts import prompt_ids, uses_chat_template
from ftis.node.runner.rng import RngState
from ftis.node.runner.round_report import RoundReport
from ftis.node.runner.scoring import score_batch, score_own_batch
from ftis.node.runner.utilisation import Stopwatch
from ftis.node.swarm.inbox import MISSED_ROUND, NONFINITE, PROMPT_MISMATCH
from ftis.node.swarm.transport import ReceivedBatch, Transport
from ftis.node.tasks import Problem, Task
from ftis.node.trainer.horizontal import MergedGroups, merge_shared
from ftis.node.trainer.mix import Candidate, select_peer_groups
from ftis.node.trainer.trainer import Trainer
from ftis.protocol import (
    Group,
    PolicyInfo,
    RolloutBatch,
    SamplingSettings,
    TaskRef,
    TokenizerInfo,
)
from ftis.protocol.limits import MAX_SEQ


class RoundInterrupted(RuntimeError):
    """The node was stopped inside an optimizer step: its weights belong to no completed round."""


@dataclass(frozen=True)
class NodeState:
    """A node's state at the end of a completed round, besides the model's weights (``checkpoint.py``)."""

    round: int  # rounds completed: the number of the next round
    rng: RngState
    trainer: dict[str, object]  # Trainer.state_dict(): optimizer state and policy version


@dataclass(frozen=True)
class _Boundary:
    round: int
    steps_started: int
    rng: RngState


class Node:
    def __init__(self, config: NodeConfig, policy: Policy, task: Task, generator: Generator, transport: Transport):
        self.config, self.policy, self.task, self.generator, self.transport = (
            config, policy, task, generator, transport)
        self.trainer = Trainer(policy.model, policy.adapter, config.loss, config.trainer,
                               pad_id=policy.tokenizer.pad_token_id or 0)
        self.round = 0
        self._rng = np.random.default_rng([config.model.seed, 1])
        embedding_rows = int(policy.model.get_input_embeddings().weight.shape[0])
        self._vocab_size = max(len(policy.tokenizer), embedding_rows)  # what this node's batches declare
        self._embedding_rows = embedding_rows  # a peer's id at or above it has no embedding here
        generation = config.generation
        self.sampling = SamplingSettings(generation.temperature, generation.top_p, generation.top_k,
                                         generation.max_new_tokens)
        self.chat = uses_chat_template(policy.tokenizer, config.model.chat_template)
        self._latest_seq: dict[str, int] = {}  # rounds mode: each peer's newest batch delivered so far
        self._missed: dict[str, int] = {}  # rounds mode: deadlines each live peer has missed in a row
        self._horizontal = config.loop.grouping == "horizontal"
        self._later = LaterRounds()  # horizontal grouping: peers' batches of rounds not reached yet
        self._boundary = self._snapshot()

    def run_round(self, evaluate: Callable[[], object] | None = None, overlap: Overlap | None = None) -> RoundReport:
        """One round. ``evaluate`` (the run loop's periodic evaluation) runs once this round's batch is
        published and before its step: the weights are still the ones the round generated with, and the
        peers have this node's batch without waiting for the evaluation (in rounds mode, they train meanwhile).
        ``overlap`` (the run loop's helper threads, ``overlap.py``): publishing and decoding peers' batches
        overlap generating and training, with the same results; the round waits for its publish after its
        step (raising its error), so the round's report counts it as before."""
        self._boundary = self._snapshot()  # the state of the last completed round, for state_dict
        watch = Stopwatch()  # where the round's wall time goes (utilisation.py)
        own = self._generate(watch, overlap)
        with watch.part("publish"):
            if overlap is None:
                self.transport.publish(own.batch)
            else:
                overlap.publisher.submit(self.transport.publish, own.batch)
        if evaluate is not None:
            with watch.part("eval"):
                evaluate()
        with watch.part("score_own"):  # the rewards computed while building the batch: decoded and scored once
            scored_own = score_own_batch(own.batch, own.rewards, off_policy=self.config.loss.filter_local)
        with watch.part("collect"):
            received, waited, late = self._collect(own.arrived)
        candidates, peer_rewards, unusable = [], [], 0
        batches_by_peer: dict[str, int] = {}  # the peers' batches this step draws on (for their scores)
        rounds_mode = self.config.loop.mode == "rounds"  # a peer's batch of a later round waits for that round
        with watch.part("score_peers"):
            for item in self._later.take(received, self.round) if rounds_mode else received:
                scored = score_batch(item.batch, self.task, self.policy.tokenizer,
                                     trust_peer_answers=self.config.task.trust_peer_answers, off_policy=True,
                                     vocab_size=self._embedding_rows, texts=own.peer_texts.get(batch_key(item)),
                                     split=self.config.task.split)
                if scored.mismatched:  # prompts that are not their problems': the peer is charged, once a batch
                    self.transport.report_fault(item.peer_id, PROMPT_MISMATCH)
                candidates += [Candidate(group, _freshness(item, self.config.swarm.max_age_s))
                               for group in scored.groups]
                batches_by_peer[item.peer_id] = batches_by_peer.get(item.peer_id, 0) + 1
                peer_rewards += scored.rewards
                unusable += scored.unusable
        with watch.part("select"):
            chosen = select_peer_groups(candidates, self.config.mix.max_peer_groups, vertical=not self._horizontal,
                                        share=self.config.mix.max_peer_share)
            groups = [*scored_own.groups, *(c.group for c in chosen)]  # own first: the reference of a shared prompt
            merged = merge_shared(groups) if self._horizontal else MergedGroups(groups, [], 0)
        with watch.part("train"):
            step = self.trainer.step(merged.groups)
        if overlap is not None:
            with watch.part("publish"):
                overlap.publisher.flush()
        with watch.part("generate"):  # the generator's own work: vLLM copies the new weights into its engine
            self.generator.sync_weights(self.trainer.policy_version)
        for peer in step.nonfinite_peers:  # a refused step: the peers whose groups alone were not finite
            if peer in batches_by_peer:
                self.transport.report_fault(peer, NONFINITE)
        for peer, counts in step.filtered_by_peer.items():  # the filter's verdict on each peer, for its score
            if peer in batches_by_peer:  # not this node's own stale groups
                self.transport.report_filtered(peer, batches_by_peer[peer], counts.completions,
                                               counts.divergence_filtered)
        by_peer: dict[str, int] = {}
        for candidate in chosen:
            by_peer[candidate.group.peer_id] = by_peer.get(candidate.group.peer_id, 0) + 1
        report = RoundReport(
            round=self.round,
            own_reward=float(np.mean(scored_own.rewards)) if scored_own.rewards else float("nan"),
            peer_reward=float(np.mean(peer_rewards)) if peer_rewards else float("nan"),
            own_groups=len(scored_own.groups),
            peer_groups_received=len(candidates),
            peer_groups_used=len(chosen),
            peer_groups_by_peer=by_peer,
            unusable_groups=unusable,
            generation_tokens=own.tokens,
            generation_seconds=own.seconds,
            waited_seconds=waited,
            late_peers=late,
            step=step,
            transport=self.transport.stats(),
            scores=self.transport.scores(),
            merged_groups=merged.merged,
            merged_group_size=float(np.mean(merged.sizes)) if merged.sizes else float("nan"),
            mismatched_groups=merged.mismatched,
            generator=_generator_stats(self.generator),
            seconds=watch.seconds,
        )
        self.round += 1
        if rounds_mode:  # fall into step with peers that are ahead
            self.round = max(self.round, self._swarm_round())
        return report

    def state_dict(self) -> NodeState:
        """The state as of the end of the last completed round (the weights are the policy's). Callable at
        any point, e.g. after Ctrl-C interrupted a round: the round's random draws are undone by taking the
        RNG states of its start. Raises ``RoundInterrupted`` if the round was stopped inside its optimizer
        step, where the weights are neither the last round's nor the next one's."""
        if self.round != self._boundary.round:  # a round completed since the snapshot: we are between rounds
            self._boundary = self._snapshot()
        if self.trainer.steps_started != self._boundary.steps_started:
            raise RoundInterrupted(f"round {self.round} was stopped inside its optimizer step")
        return NodeState(self._boundary.round, self._boundary.rng, self.trainer.state_dict())

    def load_state_dict(self, state: NodeState) -> None:
        """Continue from ``state``: its round, optimizer, policy version and RNG states. Load the weights into
        the policy first: the generator takes them here (``sync_weights``)."""
        self.trainer.load_state_dict(state.trainer)
        self.generator.sync_weights(self.trainer.policy_version)
        self.round = state.round
        state.rng.restore(self._rng)
        self._boundary = self._snapshot()

    def _snapshot(self) -> _Boundary:
        return _Boundary(self.round, self.trainer.steps_started, RngState.capture(self._rng))

    def _collect(self, arrived: list[ReceivedBatch]) -> tuple[list[ReceivedBatch], float, int]:
        """Peers' batches for this round's step (``arrived``: those taken earlier in the round, first), the
        seconds spent waiting, and the live peers still missing at the deadline (rounds mode; async mode
        takes what has arrived and never waits)."""
        received = [*arrived, *self.transport.receive()]
        if self.config.loop.mode == "async":
            return received, 0.0, 0
        started = time.monotonic()
        deadline = started + self.config.loop.round_deadline_s
        self._note_seqs(received)
        asked = -float("inf")
        while (missing := self._missing_peers()) and time.monotonic() < deadline:
            if time.monotonic() - asked >= _ROUNDS_REPOLL_S:  # don't wait out the transport's poll period
                self.transport.poll_now()
                asked = time.monotonic()
            time.sleep(_ROUNDS_POLL_S)
            arrived = self.transport.receive()
            self._note_seqs(arrived)
            received += arrived
        for peer in missing & self._live_peers():  # not the placeholders of peers short of min_peers
            self._missed[peer] = self._missed.get(peer, 0) + 1
            self.transport.report_fault(peer, MISSED_ROUND)
        return received, time.monotonic() - started, len(missing)

    def _note_seqs(self, received: list[ReceivedBatch]) -> None:
        for item in received:
            self._latest_seq[item.peer_id] = max(item.batch.seq, self._latest_seq.get(item.peer_id, -1))
            self._missed.pop(item.peer_id, None)

    def _live_peers(self) -> set[str]:
        """Peers announced within the TTL, with this node's tokenizer, not muted (a muted peer's batches are
        refused anyway, and a peer that got itself muted must not hold every round up to the deadline)."""
        live_since = time.time() - self.config.swarm.announcement_ttl_s
        muted = {peer for peer, score in self.transport.scores().items() if score.muted_until is not None}
        return {member.peer_id for member in self.transport.members()
                if member.peer_id != self.transport.peer_id and member.tokenizer == self.policy.fingerprint
                and member.last_seen >= live_since and member.peer_id not in muted}

    def _missing_peers(self) -> set[str]:
        """Live peers that have not yet delivered a batch of this round or a later one (a batch that
        arrived early, during an earlier round's wait, counts), unless they missed the last
        ``MISSED_ROUNDS_IGNORED`` deadlines, plus a placeholder for each peer short of ``loop.min_peers``."""
        awaited = {peer for peer in self._live_peers() if self._missed.get(peer, 0) < MISSED_ROUNDS_IGNORED}
        missing = {peer for peer in awaited if self._latest_seq.get(peer, -1) < self.round}
        wanted = self.config.loop.min_peers
        return missing | {f"(peer {k} of {wanted})" for k in range(len(awaited) + 1, wanted + 1)}

    def _swarm_round(self) -> int:
        """The newest round a strict majority of the live peers have delivered a batch of (or of a later
        round), at most ``MAX_JUMP_ROUND``; -1 when fewer than that majority have delivered any."""
        live = self._live_peers()
        reached = sorted((self._latest_seq[peer] for peer in live if peer in self._latest_seq), reverse=True)
        quorum = len(live) // 2 + 1
        return min(reached[quorum - 1], MAX_JUMP_ROUND) if len(reached) >= quorum else -1

    def _problems(self) -> list[Problem]:
        split, count = self.config.task.split, self.config.generation.prompts_per_round
        if self._horizontal:
            return shared_problems(self.task, split, count, self.config.loop.swarm_seed, self.round)
        size = self.task.size(split)
        if size is None:  # a synthetic task: any index is a problem
            indices = self._rng.integers(0, 2**31 - 1, size=count)
        else:
            indices = self._rng.choice(size, size=count, replace=size < count)
        return [self.task.problem(split, int(index)) for index in indices]

    def _generate(self, watch: Stopwatch, overlap: Overlap | None) -> "_Own":
        started = time.perf_counter()
        problems = self._problems()
        tokenizer = self.policy.tokenizer
        prompts = [prompt_ids(tokenizer, self.task.prompt(p), chat=self.chat) for p in problems]
        seed = int(self._rng.integers(2**31))
        arrived, peer_texts = [], None  # with overlap: peers' batches so far, decoded while the generator runs
        if overlap is not None:
            arrived = self.transport.receive()
            peer_texts = overlap.decode_ahead(arrived, tokenizer, self._embedding_rows) if arrived else None
        with watch.part("generate"):
            completions = self.generator.generate(prompts, self.config.generation.group_size, self.sampling, seed=seed)
        decoded = peer_texts.result() if peer_texts is not None else {}  # the tokenizer is free again from here
        groups, rewards_by_group = [], []
        for k, (problem, prompt, generated) in enumerate(zip(problems, prompts, completions, strict=True)):
            texts = tokenizer.batch_decode([c.token_ids.tolist() for c in generated], skip_special_tokens=True)
            rewards = [self.task.reward(text, problem.answer) for text in texts]
            rewards_by_group.append(rewards)
            groups.append(Group(
                group_id=shared_group_id(self.config.swarm.run_id, self.round, k) if self._horizontal
                else f"{self.transport.peer_id}/{self.round}/{k}",
                task=TaskRef(problem.dataset, problem.split, problem.index, problem.answer),
                prompt_ids=prompt,
                completions=tuple(c.to_completion(r) for c, r in zip(generated, rewards, strict=True)),
            ))
        batch = RolloutBatch(
            run_id=self.config.swarm.run_id,
            peer_id=self.transport.peer_id,
            seq=self.round,
            created_at=time.time(),
            policy=PolicyInfo(self.policy.name, self.policy.revision or "", self.policy.adapter,
                              self.trainer.policy_version),
            tokenizer=TokenizerInfo(self.policy.fingerprint, self._vocab_size),
            sampling=self.sampling,
            groups=tuple(groups),
        )
        tokens = sum(c.num_tokens for generated in completions for c in generated)
        seconds = time.perf_counter() - started
        watch.seconds["build"] = seconds - watch.seconds["generate"]
        return _Own(batch, rewards_by_group, tokens, seconds, arrived, decoded)


def _freshness(item: ReceivedBatch, max_age_s: float) -> float:
    """When the batch was made, as the mix ranks it: its creation time, unless that is after it arrived (a clock
    far ahead, or a peer dating its batches ahead to be chosen first): then as stale as a batch can be."""
    created = item.batch.created_at
    return created if created <= item.received_at else item.received_at - max_age_s


def _generator_stats(generator: object) -> dict[str, object]:
    """A backend's counters, for backends that keep some (vLLM: weight syncs, stale generations)."""
    stats = getattr(generator, "stats", None)
    return asdict(stats()) if callable(stats) else {}


# Rounds mode: a live peer that missed this many deadlines in a row is not waited for until it delivers again.
MISSED_ROUNDS_IGNORED = 2
# ...and no node jumps past this round, whoever claims it: half the protocol's range (MAX_SEQ / 2 rounds, 17,000
# years at a round a second), so a node can always publish the rounds after it.
MAX_JUMP_ROUND = MAX_SEQ // 2
_ROUNDS_POLL_S = 0.05  # rounds mode: how often the local inbox is checked while waiting (no network call)
_ROUNDS_REPOLL_S = 0.1  # ...and how often the transport is asked to read the announcements meanwhile


@dataclass(frozen=True)
class _Own:
    batch: RolloutBatch
    rewards: list[list[float]]  # this node's rewards of each group's completions (score_own_batch)
    tokens: int
    seconds: float
    arrived: list[ReceivedBatch]  # peers' batches taken before generating (with overlap), for this round's step
    peer_texts: Texts  # ...their completions' texts (decode_groups)
