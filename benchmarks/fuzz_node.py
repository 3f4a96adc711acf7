"""Fuzzing of a real tiny node with hostile batches: decode, the door, scoring, the mix and the training step.

Run (from the repo root):  python -m benchmarks.fuzz_node [--cases N] [--seed S] [--per-round K] [--out DIR]
                           python -m benchmarks.fuzz_node --replay runs/fuzz-node/escape-1/minimal
                           python -m benchmarks.fuzz_node --reproduce long-prompt-trusted   (``list``: every one)

--cases: hostile batches in all (default 100,000); --seed: the run's seed (the same seed, the same cases);
--per-round: cases a hostile round publishes (default 128); --profiles: the node settings it rotates through
(default async,rounds,math500: ``benchmarks/fuzzing/node.py``); --rss-bound: the RSS growth allowed, MB (default
100); --skip: case kinds drawn again (e.g. ``long_prompt/32768``: a known finding whose every round takes minutes);
--out: where findings' reproducers and ``summary.json`` go (default runs/fuzz-node/).

What runs: ``benchmarks/fuzzing/run.py`` (the loop and the four properties: no exception out of ``run_round``, RSS
growth under the bound after warm-up, no forward pass past ``max_tokens_per_microbatch``, an honest batch trained
on in the round after every hostile one), over the cases of ``fuzzing/hostile.py`` and ``fuzzing/raw.py``. Prints
the cases, rounds and seconds, each maker's outcomes (refused at the inbox by reason, charged beyond it, trained
on, scored, unusable, not taken), RSS, the largest pass against its bound, and every escape with its reproducer;
exits 1 if a property failed. The quick run is ``tests/test_fuzz_node.py``.
"""

import argparse
import sys
from collections import defaultdict
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000, help="Hostile batches in all (default 100,000).")
    parser.add_argument("--seed", type=int, default=0, help="The run's seed (default 0).")
    parser.add_argument("--per-round", type=int, default=128, help="Cases a hostile round publishes (default 128).")
    parser.add_argument("--profiles", default="async,rounds,math500", help="Node settings to rotate through.")
    parser.add_argument("--rss-bound", type=float, default=100.0, help="RSS growth allowed after warm-up, MB.")
    parser.add_argument("--out", type=Path, default=Path("runs/fuzz-node"), help="Where reproducers go.")
    parser.add_argument("--skip", default="", help="Case kinds (maker/variant starts, comma-separated) to draw "
                        "again: a known finding that costs minutes a round, left out of a long run until fixed.")
    parser.add_argument("--replay", type=Path, help="Replay a saved finding's cases (a folder) and exit.")
    parser.add_argument("--reproduce", help="Run a named reproducer (fuzzing/reproducers.py; 'list') and exit.")
    args = parser.parse_args()

    import logging

    import torch

    torch.set_num_threads(1)
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its timeouts are a hostile answer's, and counted
    if args.replay is not None:
        sys.exit(replay(args.replay))
    if args.reproduce is not None:
        sys.exit(reproduce(args.reproduce))
    from benchmarks.fuzzing.node import PROFILES
    from benchmarks.fuzzing.run import Settings, fuzz_nodes, write_summary

    profiles = tuple(args.profiles.split(","))
    weights = dict(zip(Settings.profiles, Settings.weights, strict=True))
    settings = Settings(cases=args.cases, seed=args.seed, cases_per_round=args.per_round, profiles=profiles,
                        weights=tuple(weights.get(p, 1) for p in profiles), rss_bound_mb=args.rss_bound,
                        out=args.out, skip=tuple(filter(None, args.skip.split(","))), progress=True)
    unknown = set(profiles) - set(PROFILES)
    if unknown:
        parser.error(f"unknown profiles {sorted(unknown)}; known: {', '.join(PROFILES)}")
    print(f"fuzzing a tiny node with {settings.cases:,} hostile batches, seed {settings.seed}, "
          f"{settings.cases_per_round} a round, profiles {', '.join(profiles)}", flush=True)
    tally = fuzz_nodes(settings)
    report(tally, settings)
    print(f"summary: {write_summary(tally, settings)}")
    if tally.failures(settings):
        sys.exit(1)


def replay(folder: Path) -> int:
    from benchmarks.fuzzing.repro import load_cases, profile_of
    from benchmarks.fuzzing.repro import replay as replay_cases

    cases, profile = load_cases(folder), profile_of(folder)
    print(f"replaying {len(cases)} cases ({', '.join(sorted({c.kind for c in cases}))}) on a fresh {profile} node")
    findings = replay_cases(profile, cases)
    for finding in findings:
        print(f"FOUND {finding.signature}: {finding.error}\n" + "".join(finding.frames))
    if not findings:
        print("nothing found: the node ran both rounds within its bounds")
    return 1 if findings else 0


def reproduce(name: str) -> int:
    from benchmarks.fuzzing import reproducers

    if name not in reproducers.REPRODUCERS:
        for known, reproducer in reproducers.REPRODUCERS.items():
            print(f"{known} ({reproducer.profile}, {reproducer.kind}): {reproducer.what}")
        return 0 if name == "list" else 2
    findings = reproducers.reproduce(name)
    for finding in findings:
        print(f"FOUND {finding.signature}: {finding.error}\n" + "".join(finding.frames))
    if not findings:
        print("nothing found: the node ran both rounds within its bounds")
    return 1 if findings else 0


def report(tally, settings) -> None:
    from benchmarks.fuzzing.node import PEAK_MB, STALL_S

    rate = tally.cases / tally.seconds if tally.seconds else 0.0
    print(f"\n{tally.cases:,} cases in {tally.hostile_rounds:,} hostile rounds (+{tally.honest_rounds:,} honest) in "
          f"{tally.seconds:.0f} s: {rate:,.0f} cases/s")
    print("  hostile rounds by profile: " + ", ".join(f"{p} {n} ({tally.profile_seconds[p]:.0f} s)"
                                                     for p, n in tally.rounds_of.items()))
    by_maker: dict[str, dict[str, int]] = defaultdict(dict)
    for (maker, outcome), n in tally.outcomes.items():
        by_maker[maker][outcome] = n
    print("\noutcomes by maker:")
    for maker in sorted(by_maker):
        outcomes = sorted(by_maker[maker].items(), key=lambda item: -item[1])
        print(f"  {maker:<18} {sum(by_maker[maker].values()):>7,}  " + ", ".join(f"{o} {n:,}" for o, n in outcomes))
    print(f"\nescapes: {tally.count('escape')}; rounds with a pass over the bound: {tally.count('oversized_pass')}; "
          f"stalls (a round over {STALL_S:g} s): {tally.count('stall')}; scoring overruns: "
          f"{tally.count('scoring_overrun')}; peaks (RSS high-water +{PEAK_MB:g} MB in a round): {tally.count('peak')}")
    for signature, n in tally.signatures.items():
        print(f"  {n:>5}× {signature}  reproducer: {tally.reproducers.get(signature, '-')}")
    print(f"honest rounds trained on: {tally.honest_trained}/{tally.honest_rounds}")
    for failure in tally.honest_failures[:5]:
        print(f"  {failure}")
    print(f"RSS: {tally.rss_baseline_mb:.0f} MB after warm-up, at most {tally.rss_max_mb:.0f} MB after it (growth "
          f"{tally.rss_growth_mb:.1f} MB, bound {settings.rss_bound_mb:g}), {tally.rss_final_mb:.0f} MB at the end; "
          f"peak {tally.rss_peak_mb:.0f} MB; {tally.rss_trimmed_mb:.0f} MB once the allocator gave back what it kept "
          "(malloc_trim)")
    print(f"forward passes: {tally.passes:,} micro-batches, the largest {tally.worst_pass:,} tokens, bound "
          f"{tally.pass_bound:,}")
    print(f"steps refused: {tally.refused_steps}; slowest hostile round {tally.slowest_round[0]:.1f} s "
          f"({tally.slowest_round[1]})")
    if tally.skipped:
        print("drawn again (--skip): " + ", ".join(f"{kind} {n}" for kind, n in sorted(tally.skipped.items())))
    if tally.maker_errors:
        print("harness errors building cases: " + "; ".join(f"{n}× {e}" for e, n in tally.maker_errors.items()))
    failures = tally.failures(settings)
    print("properties: " + ("all four held" if not failures else "FAILED: " + " | ".join(failures)))


if __name__ == "__main__":
    main()
