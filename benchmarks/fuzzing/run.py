"""The node fuzzer's loop: hostile rounds, each followed by an honest one, and the four properties checked.

    result = fuzz_nodes(Settings(cases=300, seed=0))      # what benchmarks/fuzz_node.py and the tests run

Each hostile round draws ``cases_per_round`` cases from ``raw.MAKERS`` (by weight; a profile's first round holds
every maker twice), each under its own peer id, publishes them to one profile's node and runs ``node.run_round()``:
hundreds of batches through decode, the door and scoring, then one training step. The properties:

1. **No escape**: ``run_round`` raises nothing (``Escape``: saved with its round's cases under ``out/``; the cases
   bisected on a fresh node down to a smallest set that raises the same way, once per kind of escape);
2. **Bounded memory**: the process's RSS, after ``gc.collect()`` at the end of each round, grows less than
   ``rss_bound_mb`` from its level once every profile ran its warm-up rounds (every maker, the bombs included);
3. **Bounded passes**: no micro-batch's forward passes exceed ``trainer.max_tokens_per_microbatch`` (``Passes``);
4. **The node goes on**: an honest peer publishes a batch every round (the node's problems and prompts, rewards
   that vary, its log-probs the node's own), and in the round after each hostile one, which holds no cases, the
   node trains on it (its groups in the step, the step taken).

Each case's outcome is read from the node (``outcome_of``): refused at the inbox (by reason), charged beyond it, or
delivered and then trained on, scored, unusable or not taken.
"""

import contextlib
import ctypes
import gc
import json
import random
import resource
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from benchmarks.fuzzing.node import HONEST_PEER, Finding, FuzzNode, RoundOutcome
from benchmarks.fuzzing.peers import Case
from benchmarks.fuzzing.raw import MAKERS
from benchmarks.fuzzing.repro import reduce, save_finding

MAX_SAVED = 3  # rounds saved for each signature of finding
REPORTED = ("oversized_pass", "stall", "scoring_overrun", "peak")  # findings that are no escape
MAX_DRAWS = 100  # draws of a maker for a case of a kind not skipped

# Reasons charged in rounds mode whatever a case held (a peer listed a batch of another round): not a case's outcome.
_NOT_THE_CASE = {"missed_round", "slow"}


@dataclass(frozen=True)
class Settings:
    cases: int = 100_000
    seed: int = 0
    cases_per_round: int = 128
    profiles: tuple[str, ...] = ("async", "rounds", "math500")
    # each profile's share of the hostile rounds: a MATH-500 round takes its scoring time (mix.max_scoring_s, 10 s)
    weights: tuple[float, ...] = (14, 5, 1)
    identities: int = 512  # hostile peer ids, taken in turn (one case a peer a round while cases_per_round fits)
    warmup_rounds: int = 2  # per profile, before the RSS baseline
    rss_bound_mb: float = 100.0
    out: Path = Path("runs/fuzz-node")
    reduce: bool = True  # bisect each new kind of finding to a smallest set of cases
    # case kinds (or their starts, "maker/variant") drawn again when drawn: a finding already known and costly to
    # meet again (a round of minutes), left out of a long run until it is fixed
    skip: tuple[str, ...] = ()
    progress: bool = False  # a line every 10 rounds


@dataclass
class Tally:
    cases: int = 0
    hostile_rounds: int = 0
    honest_rounds: int = 0
    honest_trained: int = 0
    rounds_of: Counter = field(default_factory=Counter)  # profile -> hostile rounds
    profile_seconds: Counter = field(default_factory=Counter)  # profile -> seconds of its hostile rounds
    seconds: float = 0.0
    outcomes: Counter = field(default_factory=Counter)  # (maker, outcome) -> cases
    variants: Counter = field(default_factory=Counter)  # case kind (maker/variant) -> cases
    findings: list[Finding] = field(default_factory=list)
    signatures: Counter = field(default_factory=Counter)  # finding signature -> rounds
    reproducers: dict[str, str] = field(default_factory=dict)  # signature -> saved reproducer folder
    honest_failures: list[str] = field(default_factory=list)
    maker_errors: Counter = field(default_factory=Counter)  # the harness's own failures to build a case
    skipped: Counter = field(default_factory=Counter)  # case kinds drawn again (``Settings.skip``)
    rss_baseline_mb: float = 0.0
    rss_max_mb: float = 0.0
    rss_final_mb: float = 0.0
    rss_peak_mb: float = 0.0  # the process's high-water mark (ru_maxrss), during rounds included
    rss_trimmed_mb: float = 0.0  # at the end, after malloc_trim: the allocator's kept memory given back
    worst_pass: int = 0
    pass_bound: int = 0
    passes: int = 0
    passes_over: int = 0
    slowest_round: tuple[float, str] = (0.0, "")
    refused_steps: int = 0

    @property
    def rss_growth_mb(self) -> float:
        return self.rss_max_mb - self.rss_baseline_mb

    def count(self, what: str) -> int:
        return sum(1 for finding in self.findings if finding.what == what)

    def failures(self, settings: Settings) -> list[str]:
        """The properties that failed, in words (empty: all four held)."""
        found = []
        escapes = {s: n for s, n in self.signatures.items() if not s.startswith(REPORTED)}
        if escapes:
            found.append(f"{self.count('escape')} escapes: " + "; ".join(f"{n}× {s}" for s, n in escapes.items()))
        if self.rss_growth_mb >= settings.rss_bound_mb:
            found.append(f"RSS grew {self.rss_growth_mb:.1f} MB, bound {settings.rss_bound_mb:g} MB")
        if self.passes_over:
            found.append(f"{self.passes_over} rounds with a forward pass over {self.pass_bound} tokens (largest "
                         f"{self.worst_pass})")
        if self.honest_failures:
            found.append(f"{len(self.honest_failures)} honest rounds not trained on: {self.honest_failures[0]}")
        return found


def fuzz_nodes(settings: Settings) -> Tally:
    rng, tally = random.Random(settings.seed), Tally()
    process = psutil.Process()
    started = time.perf_counter()
    nodes = {profile: FuzzNode(profile, settings.identities) for profile in settings.profiles}
    try:
        while tally.cases < settings.cases:
            _cycle(settings, nodes, rng, tally)
            _measure(settings, nodes, process, tally)
            if settings.progress and tally.hostile_rounds % 10 == 0:
                print(f"  {tally.cases:,} cases, {tally.hostile_rounds} rounds, {time.perf_counter() - started:.0f} s, "
                      f"findings {dict(tally.signatures)}, RSS {tally.rss_final_mb:.0f} MB", flush=True)
        tally.rss_trimmed_mb = _trimmed_rss(process)
    finally:
        for fuzz in nodes.values():
            tally.passes += fuzz.passes.count
            fuzz.close()
    tally.seconds = time.perf_counter() - started
    return tally


def _trimmed_rss(process: psutil.Process) -> float:
    """RSS once glibc gave back the free memory it keeps (``malloc_trim``): what live objects hold, besides what the
    allocator kept after a peak. The same as the RSS where that is not glibc."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return process.memory_info().rss / 2**20


def _cycle(settings: Settings, nodes: dict[str, FuzzNode], rng: random.Random, tally: Tally) -> None:
    """A hostile round on one profile's node, then the honest round; a node that escaped is replaced by a fresh
    one."""
    profile = _next_profile(settings, tally.rounds_of)
    fuzz = nodes[profile]
    count = min(settings.cases_per_round, settings.cases - tally.cases)
    cases = _cases(fuzz, rng, count, tally, settings.skip, every_maker=tally.rounds_of[profile] == 0)
    tally.rounds_of[profile] += 1
    outcome = _hostile_round(settings, fuzz, rng, cases, tally)
    if _record(settings, outcome.findings, tally):
        fuzz = nodes[profile] = _fresh(settings, fuzz, tally)
    outcome = _honest_round(fuzz, rng, tally, cases)
    if _record(settings, outcome.findings, tally):
        nodes[profile] = _fresh(settings, fuzz, tally)


def _next_profile(settings: Settings, rounds_of: Counter) -> str:
    """The profile furthest behind its share of the rounds (each profile's warm-up first)."""
    for profile in settings.profiles:
        if rounds_of[profile] < settings.warmup_rounds:
            return profile
    total = sum(rounds_of.values()) + 1
    shares = dict(zip(settings.profiles, settings.weights, strict=True))
    weight = sum(shares.values())
    return min(settings.profiles, key=lambda p: rounds_of[p] / total - shares[p] / weight)


def _cases(fuzz: FuzzNode, rng: random.Random, count: int, tally: Tally, skip: tuple[str, ...],
           every_maker: bool) -> list[Case]:
    kit = fuzz.kit()
    names = list(MAKERS)
    kinds = [*names, *names] if every_maker else []
    kinds += rng.choices(names, weights=[weight for _, weight in MAKERS.values()], k=max(0, count - len(kinds)))
    cases = []
    for name in kinds:
        peer = fuzz.identities.take()
        for _ in range(MAX_DRAWS):
            try:
                case = MAKERS[name][0](kit, rng, peer, fuzz.identities.round_of(peer))
            except Exception as error:  # the harness's own bug: counted and shown, never the node's
                tally.maker_errors[f"{name}: {type(error).__name__}: {str(error)[:120]}"] += 1
                break
            if not (skip and case.kind.startswith(skip)):
                cases.append(case)
                break
            tally.skipped[case.kind] += 1
    return cases


def _hostile_round(settings: Settings, fuzz: FuzzNode, rng: random.Random, cases: list[Case],
                   tally: Tally) -> RoundOutcome:
    before = dict(fuzz.rejections())
    fuzz.publish(cases)
    fuzz.publish_honest(rng)  # every round, as a peer does (rounds mode charges a live peer that misses one)
    outcome = fuzz.run_round("hostile", cases)
    fuzz.settle()
    for peer, score in fuzz.node.transport.scores().items():
        if score.muted_until is not None:
            fuzz.identities.retire(peer)
    tally.profile_seconds[fuzz.profile] += outcome.seconds
    tally.cases += len(cases)
    tally.hostile_rounds += 1
    if outcome.seconds > tally.slowest_round[0]:
        kinds = ", ".join(sorted({case.kind.split("/")[0] for case in cases}))
        tally.slowest_round = (outcome.seconds, f"{fuzz.profile}: {kinds}")
    after = fuzz.rejections()
    for case in cases:
        tally.variants[case.kind] += 1
        tally.outcomes[case.kind.split("/")[0], outcome_of(fuzz, case, before, after, outcome)] += 1
    if outcome.report is not None and outcome.report.step.refused:
        tally.refused_steps += 1
    return outcome


def outcome_of(fuzz: FuzzNode, case: Case, before: dict, after: dict, outcome: RoundOutcome) -> str:
    """What became of one case: ``refused:<reasons>`` (at the inbox, or charged beyond it), ``trained`` (groups of
    its peer in the step), ``scored`` (usable, not chosen), ``unusable``, or ``not_taken`` (deferred for room,
    held for a later round, or past the step's scoring budget)."""
    reasons = sorted(reason for (peer, reason), n in after.items()
                     if peer == case.peer_id and n > before.get((peer, reason), 0) and reason not in _NOT_THE_CASE)
    if outcome.report is None:
        return "escaped"
    charged = "refused:" + "+".join(reasons) if reasons else ""
    scored = fuzz.scored
    if scored is None or case.peer_id not in scored.batches_by_peer:
        return charged or "not_taken"
    if case.peer_id in outcome.report.peer_groups_by_peer:
        return "trained" + (f"+{charged}" if charged else "")
    return ("scored" if scored.use.get(case.peer_id) in ("token", "sequence") else "unusable") + (
        f"+{charged}" if charged else "")


def _honest_round(fuzz: FuzzNode, rng: random.Random, tally: Tally, cases: list[Case]) -> RoundOutcome:
    """The round after a hostile one, an honest peer's batch in it; a finding carries the hostile round's cases (a
    batch held for a later round is trained on here)."""
    fuzz.publish_honest(rng)
    outcome = fuzz.run_round("honest", cases)
    tally.honest_rounds += 1
    report = outcome.report
    if report is None:
        return outcome
    if HONEST_PEER in report.peer_groups_by_peer and report.step.trained:
        tally.honest_trained += 1
    else:
        tally.honest_failures.append(f"{fuzz.profile} round {report.round}: honest groups used "
                                     f"{report.peer_groups_by_peer.get(HONEST_PEER, 0)}, step trained "
                                     f"{report.step.trained} (refused {report.step.refused}), its score "
                                     f"{report.scores.get(HONEST_PEER)}")
    return outcome


def _record(settings: Settings, findings: list[Finding], tally: Tally) -> bool:
    """Record a round's findings: each saved (the first few of a signature) and bisected once per signature (an
    escape or a pass past the bound: what one round takes in time or memory is too noisy to bisect on); whether one
    is an escape."""
    for finding in findings:
        tally.findings.append(replace(finding, cases=[]))  # its cases are on disk: the run holds no payload
        tally.signatures[finding.signature] += 1
        if tally.signatures[finding.signature] > MAX_SAVED:
            continue
        folder = save_finding(settings.out, len(tally.findings), finding)
        print(f"FOUND {finding.signature} ({finding.profile}, {finding.phase} round, "
              f"{len(finding.cases)} cases): {finding.error[:200]} -> {folder}", flush=True)
        if (settings.reduce and finding.what in ("escape", "oversized_pass")
                and finding.signature not in tally.reproducers and finding.cases):
            tally.reproducers[finding.signature] = str(reduce(finding, folder))
    return any(finding.what == "escape" for finding in findings)


def _fresh(settings: Settings, fuzz: FuzzNode, tally: Tally) -> FuzzNode:
    tally.passes += fuzz.passes.count
    fuzz.close()
    return FuzzNode(fuzz.profile, settings.identities)


def _measure(settings: Settings, nodes: dict[str, FuzzNode], process: psutil.Process, tally: Tally) -> None:
    gc.collect()
    rss = process.memory_info().rss / 2**20
    tally.rss_final_mb = rss
    tally.rss_peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10  # KiB on Linux
    warm = all(tally.rounds_of[p] >= settings.warmup_rounds for p in settings.profiles)
    if warm and not tally.rss_baseline_mb:
        tally.rss_baseline_mb = tally.rss_max_mb = rss
    elif tally.rss_baseline_mb:
        tally.rss_max_mb = max(tally.rss_max_mb, rss)
    tally.pass_bound = max(fuzz.passes.bound for fuzz in nodes.values())
    tally.worst_pass = max(tally.worst_pass, *(fuzz.passes.worst for fuzz in nodes.values()))
    tally.passes_over = sum(1 for finding in tally.findings if finding.what == "oversized_pass")


def summary(tally: Tally, settings: Settings) -> dict:
    """The run's figures as JSON-ready values (``out/summary.json``)."""
    return {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in settings.__dict__.items()},
            "cases": tally.cases, "hostile_rounds": tally.hostile_rounds, "honest_rounds": tally.honest_rounds,
            "honest_trained": tally.honest_trained, "seconds": round(tally.seconds, 1),
            "rounds_by_profile": dict(tally.rounds_of),
            "seconds_by_profile": {p: round(s, 1) for p, s in tally.profile_seconds.items()},
            "findings": dict(tally.signatures), "reproducers": tally.reproducers,
            "honest_failures": tally.honest_failures[:20], "maker_errors": dict(tally.maker_errors),
            "skipped": dict(tally.skipped),
            "rss_mb": {"baseline": round(tally.rss_baseline_mb, 1), "max": round(tally.rss_max_mb, 1),
                       "final": round(tally.rss_final_mb, 1), "growth": round(tally.rss_growth_mb, 1),
                       "peak": round(tally.rss_peak_mb, 1), "trimmed_at_end": round(tally.rss_trimmed_mb, 1)},
            "passes": {"count": tally.passes, "worst": tally.worst_pass, "bound": tally.pass_bound,
                       "rounds_over": tally.passes_over},
            "refused_steps": tally.refused_steps, "slowest_round_s": [round(tally.slowest_round[0], 2),
                                                                     tally.slowest_round[1]],
            "outcomes": {f"{maker} {outcome}": n for (maker, outcome), n in sorted(tally.outcomes.items())},
            "variants": dict(sorted(tally.variants.items()))}


def write_summary(tally: Tally, settings: Settings) -> Path:
    settings.out.mkdir(parents=True, exist_ok=True)
    path = settings.out / "summary.json"
    path.write_text(json.dumps(summary(tally, settings), indent=1, ensure_ascii=False) + "\n")
    return path
