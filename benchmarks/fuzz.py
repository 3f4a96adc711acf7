"""Fuzzing of the protocol decoders and of the node's announcement handling, at scale.

Run (from the repo root):  python -m benchmarks.fuzz [--inputs N] [--seed S] [--out DIR]
--inputs: how many inputs in all (default 100,000); --seed: the run's seed (default 0; the same seed
gives the same inputs); --out: where a violation's reproducer goes (default runs/fuzz/).

What runs (the parts live in ``tests/``, shared with the short run in ``tests/test_fuzz.py``):
- 70% batch decoding, 14% announcement decoding: seeds of several shapes (``fuzz_inputs.batch_seeds``,
  ``announcement_seeds``) mutated byte by byte or value by value (``fuzz_inputs.MUTATIONS``);
- 6% property-based (hypothesis): batches and announcements drawn anywhere within the limits, and
  near-valid messages (a seed with drawn values in it) — ``benchmarks/fuzzing/strategies.py``;
- 5% ``Directory.read`` over hostile DHT shard values, 5% ``Inbox`` steps with decoded-but-hostile
  descriptors and payloads (``benchmarks/fuzzing/swarm.py``).
Every decoded input is judged by ``fuzzing/oracle.py``'s ``judge``: refused with a ``DecodeError`` naming a field
and nothing else; if accepted, every limit of ``protocol/limits.py`` holds (checked independently, from
the decoded object) and it round-trips; the peak allocation of decoding (tracemalloc) within
``memory_bound``. Prints outcomes (refused, by field; accepted) per target and per mutation, inputs/s,
the worst peak allocation against its bound; writes each violation's input as hex to ``--out`` and
exits 1 if there was any.
"""

import argparse
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed

from benchmarks.fuzzing import inputs as fuzz_inputs
from benchmarks.fuzzing import strategies as fuzz_strategies
from benchmarks.fuzzing.oracle import ANNOUNCEMENT, BATCH, Outcome, Target, Violation, judge
from benchmarks.fuzzing.swarm import DirectoryFuzz, InboxFuzz, make_owners
from ftis.protocol import encode
from ftis.protocol.announcement import encode_announcement

SHARES = {"batch": 0.70, "announcement": 0.14, "hypothesis": 0.06, "directory": 0.05, "inbox": 0.05}
MAX_REPRODUCERS = 20


@dataclass
class Tally:
    outcomes: Counter = field(default_factory=Counter)  # (target, "accepted" | refused field) -> inputs
    kinds: Counter = field(default_factory=Counter)  # (target, mutation, "accepted" | "refused") -> inputs
    seconds: Counter = field(default_factory=Counter)  # target -> seconds
    inputs: Counter = field(default_factory=Counter)  # target -> inputs
    worst: tuple[float, int, int, str] = (0.0, 0, 0, "")  # peak / bound, peak, input bytes, what
    largest: tuple[int, int, int, str] = (0, 0, 0, "")  # the largest peak: peak, input bytes, its bound, what
    violations: list[str] = field(default_factory=list)

    def judged(self, target: Target, kind: str, data: bytes, outcome: Outcome) -> None:
        refused = outcome.field is not None
        self.outcomes[target.name, re.sub(r"\[\d+\]", "[i]", outcome.field) if refused else "accepted"] += 1
        self.kinds[target.name, kind, "refused" if refused else "accepted"] += 1
        if outcome.bound and outcome.peak / outcome.bound > self.worst[0]:
            self.worst = (outcome.peak / outcome.bound, outcome.peak, len(data), f"{target.name} {kind}")
        if outcome.peak > self.largest[0]:
            self.largest = (outcome.peak, len(data), outcome.bound, f"{target.name} {kind}")


def _record(tally: Tally, out: Path, name: str, violation: Violation, data: bytes) -> None:
    tally.violations.append(f"{name}: {violation}")
    if len(tally.violations) <= MAX_REPRODUCERS:
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{name}.hex"
        path.write_text(f"# {violation}\n{data.hex()}\n")
        print(f"VIOLATION {name}: {violation} (input: {path})", flush=True)


def fuzz_decoder(tally: Tally, target: Target, seeds: list[bytes], kinds: list[str], count: int, rng: random.Random,
                 out: Path) -> None:
    started = time.perf_counter()
    for i in range(count):
        kind, data = fuzz_inputs.mutate(rng, seeds, kinds)
        try:
            tally.judged(target, kind, data, judge(target, data))
        except Violation as violation:
            _record(tally, out, f"{target.name}-{i}-{kind}", violation, data)
    tally.seconds[target.name] += time.perf_counter() - started
    tally.inputs[target.name] += count


def fuzz_properties(tally: Tally, count: int, seed: int, out: Path) -> None:
    """Four hypothesis properties, ``count`` examples in all. A failing example is shrunk, then recorded."""
    batch_seeds = list(fuzz_inputs.batch_seeds().values())
    announcement_seeds = list(fuzz_inputs.announcement_seeds().values())
    properties = [
        ("valid", BATCH, fuzz_strategies.batches(), encode),
        ("near_valid", BATCH, fuzz_strategies.near_valid(batch_seeds), bytes),
        ("valid", ANNOUNCEMENT, fuzz_strategies.announcements(), encode_announcement),
        ("near_valid", ANNOUNCEMENT, fuzz_strategies.near_valid(announcement_seeds), bytes),
    ]
    for kind, target, strategy, to_bytes in properties:
        name, started, last = f"hypothesis {target.name} {kind}", time.perf_counter(), [b""]
        examples = tally.inputs[name]
        try:
            _property(tally, target, f"hypothesis_{kind}", to_bytes, last, count // len(properties), seed)(strategy)()
        except Violation as violation:  # hypothesis shrank it: the last example run is the smallest
            _record(tally, out, f"{target.name}-hypothesis_{kind}", violation, last[0])
        tally.seconds[name] += time.perf_counter() - started
        tally.inputs[name] = examples + sum(n for (t, k, _), n in tally.kinds.items()
                                            if t == target.name and k == f"hypothesis_{kind}")


def _property(tally: Tally, target: Target, kind: str, to_bytes: Callable[[Any], bytes], last: list[bytes],
              examples: int, seed: int) -> Callable[[Any], Callable[[], None]]:
    """A hypothesis test of ``target`` over a strategy (``_property(...)(strategy)()`` runs it)."""

    def check(value: Any) -> None:
        data = last[0] = to_bytes(value)
        tally.judged(target, kind, data, judge(target, data))

    def run(strategy: Any) -> Callable[[], None]:
        options = settings(max_examples=examples, database=None, deadline=None, suppress_health_check=list(HealthCheck))
        return hypothesis_seed(seed)(options(given(strategy)(check)))

    return run


def fuzz_swarm(tally: Tally, name: str, make: Callable[[], object], count: int, rng: random.Random,
               out: Path) -> None:
    """``count`` steps of a ``fuzzing/swarm.py`` harness; after a violation, a fresh harness carries on."""
    started, harness = time.perf_counter(), make()
    for i in range(count):
        try:
            tally.outcomes[name, harness.step(rng)] += 1
        except Violation as violation:
            _record(tally, out, f"{name}-{i}", violation, repr(violation).encode())
            harness = make()
    tally.seconds[name] += time.perf_counter() - started
    tally.inputs[name] += count


def report(tally: Tally) -> None:
    total, seconds = sum(tally.inputs.values()), sum(tally.seconds.values())
    print(f"\n{total:,} inputs in {seconds:.1f} s: {total / seconds:,.0f} inputs/s")
    for name, count in tally.inputs.items():
        print(f"  {name:<34} {count:>8,}  {count / tally.seconds[name]:>7,.0f}/s")
    for target in ("batch", "announcement"):
        outcomes = {what: n for (name, what), n in tally.outcomes.items() if name == target}
        accepted = outcomes.pop("accepted", 0)
        print(f"\n{target}: {sum(outcomes.values()) + accepted:,} inputs, {accepted:,} accepted, "
              f"{sum(outcomes.values()):,} refused, by field:")
        for what, n in sorted(outcomes.items(), key=lambda item: -item[1]):
            print(f"  {n:>7,}  {what}")
    print("\nby mutation (accepted / refused):")
    for target in ("batch", "announcement"):
        kinds = sorted({kind for name, kind, _ in tally.kinds if name == target})
        cells = [f"{k} {tally.kinds[target, k, 'accepted']:,}/{tally.kinds[target, k, 'refused']:,}" for k in kinds]
        print(f"  {target}: " + ", ".join(cells))
    for name in ("directory", "inbox"):
        steps = {what: n for (target, what), n in tally.outcomes.items() if target == name}
        print(f"\n{name} steps: " + ", ".join(f"{what} {n:,}" for what, n in sorted(steps.items())))
    ratio, peak, size, what = tally.worst
    print(f"\nworst peak allocation of a decode: {ratio:.1%} of its bound ({peak:,} bytes for a {size:,}-byte "
          f"input, {what})")
    peak, size, bound, what = tally.largest
    print(f"largest peak allocation: {peak:,} bytes for a {size:,}-byte input ({what}; its bound {bound:,})")
    print(f"violations: {len(tally.violations)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=100_000, help="Inputs in all (default 100,000).")
    parser.add_argument("--seed", type=int, default=0, help="The run's seed (default 0).")
    parser.add_argument("--out", type=Path, default=Path("runs/fuzz"), help="Where reproducers go.")
    args = parser.parse_args()
    counts = {name: int(args.inputs * share) for name, share in SHARES.items()}
    rng, tally = random.Random(args.seed), Tally()
    print(f"fuzzing {args.inputs:,} inputs, seed {args.seed}: " + ", ".join(f"{n} {c:,}" for n, c in counts.items()),
          flush=True)
    fuzz_decoder(tally, BATCH, list(fuzz_inputs.batch_seeds().values()), fuzz_inputs.MUTATIONS, counts["batch"], rng,
                 args.out)
    fuzz_decoder(tally, ANNOUNCEMENT, list(fuzz_inputs.announcement_seeds().values()),
                 fuzz_inputs.ANNOUNCEMENT_MUTATIONS, counts["announcement"], rng, args.out)
    fuzz_properties(tally, counts["hypothesis"], args.seed, args.out)
    owners = make_owners(4)
    fuzz_swarm(tally, "directory", lambda: DirectoryFuzz(owners), counts["directory"], rng, args.out)
    fuzz_swarm(tally, "inbox", InboxFuzz, counts["inbox"], rng, args.out)
    report(tally)
    if tally.violations:
        sys.exit(1)


if __name__ == "__main__":
    main()
