"""What bounding a message from its msgpack headers costs (``protocol/envelope.py``, ``check_shape``) against
decoding, and what payloads of nested empty arrays cost a decoder with it.

Run (from the repo root):  python -m benchmarks.envelope [--quick]

1. Legitimate batches: the v1 fixture ``typical`` (3 groups × 4), 32 groups × 8 completions of 77 tokens (the
   shape of ``benchmarks/wire.py``'s batches, random ids and log-probs), and 4,096 groups (``MAX_GROUPS``) of one
   8-token completion, where the 5 per-group lists hold 20,480 values. Times are the fastest of ``--repeats`` calls
   on one core, as ``timeit`` advises: the walk alone, ``read`` (the walk, msgpack and every check), ``decode``.
2. Hostile payloads: 16 and 64 MiB of nested empty arrays (1 byte each on the wire), refused by ``read``: the
   time (untraced), the peak traced allocation (a second call, under tracemalloc) and the growth of the process's
   peak RSS over both.
"""

import argparse
import contextlib
import resource
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ftis.protocol import (
    Completion,
    DecodeError,
    Group,
    PolicyInfo,
    RolloutBatch,
    SamplingSettings,
    TaskRef,
    TokenizerInfo,
    decode,
    encode,
    read,
)
from ftis.protocol.decode import BATCH_BOUNDS
from ftis.protocol.envelope import check_shape

TYPICAL = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "protocol" / "v1" / "typical.msgpack"
MiB = 1 << 20
VOCAB = 151_936


def batch(groups: int, size: int, tokens: int) -> RolloutBatch:
    rng = np.random.default_rng(0)

    def completion() -> Completion:
        return Completion(rng.integers(VOCAB, size=tokens), -rng.exponential(0.3, tokens), 1.0, "stop")

    return RolloutBatch("run", "peer", 1, 1.7e9, PolicyInfo("model", "", "full", 0), TokenizerInfo("fp", VOCAB),
                        SamplingSettings(1.0, 1.0, 0, 256), tuple(
                            Group(f"group-{k:05d}", TaskRef("gsm8k", "test", k, str(k)), rng.integers(VOCAB, size=60),
                                  tuple(completion() for _ in range(size))) for k in range(groups)))


def nested_empty_arrays(size: int) -> bytes:
    """An array of arrays of rows, each row an array of 4,096 empty arrays: at most ``size`` bytes."""
    row = b"\xdc\x10\x00" + b"\x90" * 4096
    rows = (size - 3 - 3 * 4096) // len(row)
    blocks = [min(4096, rows - start) for start in range(0, rows, 4096)]
    return b"\xdc" + len(blocks).to_bytes(2, "big") + b"".join(
        b"\xdc" + n.to_bytes(2, "big") + row * n for n in blocks)


def fastest(call: Callable[[], object], repeats: int) -> float:
    call()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def refusal(data: bytes) -> tuple[float, int, int, str]:
    """Seconds (untraced), the peak traced bytes and the peak-RSS growth (KiB) of ``read`` refusing ``data``; why."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    try:
        read(data)
        reason = "accepted"
    except DecodeError as error:
        reason = str(error)
    seconds = time.perf_counter() - start
    tracemalloc.start()
    with contextlib.suppress(DecodeError):
        read(data)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss, reason


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, the 16 MiB payload only")
    parser.add_argument("--repeats", type=int, default=None, help="calls timed per figure (default 200; quick 5)")
    args = parser.parse_args(argv)
    repeats = args.repeats or (5 if args.quick else 200)
    cases = {"typical (3x4)": TYPICAL.read_bytes(), "32x8, 77 tokens": encode(batch(32, 8, 77)),
             "4096x1, 8 tokens": encode(batch(4096, 1, 8))}
    print("| batch | bytes | walk | read | decode | walk / decode |\n|---|---|---|---|---|---|")
    for name, data in cases.items():
        n = repeats if len(data) < 1e5 else max(1, repeats // 10)
        walk = fastest(lambda data=data: check_shape(data, BATCH_BOUNDS), n)
        read_s, decode_s = fastest(lambda data=data: read(data), n), fastest(lambda data=data: decode(data), n)
        print(f"| {name} | {len(data):,} | {walk * 1e6:,.1f} µs | {read_s * 1e6:,.1f} µs | {decode_s * 1e6:,.1f} µs "
              f"| {walk / decode_s:.1%} |")
    print("\n| nested empty arrays | read refuses in | peak traced | peak RSS growth | reason |\n|---|---|---|---|---|")
    for mib in (16,) if args.quick else (16, 64):
        data = nested_empty_arrays(mib * MiB)
        seconds, peak, rss_kib, reason = refusal(data)
        print(f"| {len(data):,} B | {seconds * 1e3:.1f} ms | {peak:,} B | {rss_kib:,} KiB | {reason} |")


if __name__ == "__main__":
    main()
