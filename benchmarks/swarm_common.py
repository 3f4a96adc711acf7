"""Helpers shared by the swarm benchmarks (``exchange.py``, ``swarm_scale.py``); not a benchmark itself.

- ``synthetic_batch``: a valid protocol-v1 batch of uniformly random token ids in Qwen2.5's vocabulary
  and random log-probs on the wire's grid, so the payload barely compresses; ``batch_of_size`` aims it
  at an encoded size.
- ``bench_config``: a ``SwarmConfig`` on 127.0.0.1 with the given timings.
- ``ProcessTree``: the DHT child and ``p2pd`` of each transport (pids remembered at start), their
  memory (RSS and PSS through psutil), and ``reap``, which kills only those remembered processes
  that outlived shutdown (another session may run its own ``p2pd`` on this machine: nothing is
  killed by name).
- ``print_table``: the aligned text tables every benchmark here prints.
"""

import contextlib
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import psutil

from ftis.protocol import (
    Completion,
    Group,
    PolicyInfo,
    RolloutBatch,
    SamplingSettings,
    TaskRef,
    TokenizerInfo,
    encode,
)
from ftis.protocol.limits import LOGPROB_STEP

VOCAB_SIZE = 151_936  # Qwen2.5's: ids travel in 3 bytes
TOKENIZER = "bench-tokenizer"
MAX_COMPLETION = 4096  # tokens per completion in the large batches
MIB = 1024 * 1024


def synthetic_batch(run_id: str, peer_id: str, round_: int, created_at: float, *, groups: int, group_size: int,
                    tokens_per_completion: int, seed: int | None = None) -> RolloutBatch:
    """A batch of ``groups`` × ``group_size`` completions of ``tokens_per_completion`` random tokens each."""
    rng = np.random.default_rng(zlib.crc32(f"{peer_id}/{round_}".encode()) if seed is None else seed)
    n = tokens_per_completion
    built = []
    for g in range(groups):
        completions = tuple(
            Completion(
                token_ids=rng.integers(0, VOCAB_SIZE, n),
                sampler_logprobs=-rng.integers(0, 4096, n) * LOGPROB_STEP,  # exact on the wire's grid
                reward=float(c % 2),
                finish_reason="length",
            )
            for c in range(group_size)
        )
        built.append(Group(f"{peer_id}/{round_}/{g}", TaskRef("synthetic", "train", round_ * groups + g, "0"),
                           rng.integers(0, VOCAB_SIZE, 32), completions))
    return RolloutBatch(
        run_id=run_id,
        peer_id=peer_id,
        round=round_,
        created_at=created_at,
        policy=PolicyInfo("bench-model", "", "full", 0),
        tokenizer=TokenizerInfo(TOKENIZER, VOCAB_SIZE),
        sampling=SamplingSettings(temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=max(n, 1)),
        groups=tuple(built),
    )


def batch_of_size(run_id: str, peer_id: str, round_: int, created_at: float, target_bytes: int) -> RolloutBatch:
    """A synthetic batch whose encoded size is near ``target_bytes`` (within a few %, above ~1 KB)."""
    group_size = 8

    def build(tokens: int) -> RolloutBatch:
        per_completion = max(1, min(MAX_COMPLETION, tokens // group_size))
        groups = max(1, round(tokens / (group_size * per_completion)))
        return synthetic_batch(run_id, peer_id, round_, created_at, groups=groups, group_size=group_size,
                               tokens_per_completion=per_completion)

    tokens = max(group_size, target_bytes // 4)
    for _ in range(3):  # fixed point of tokens ≈ (target − overhead) / bytes per token
        batch = build(tokens)
        size = len(encode(batch))
        if abs(size - target_bytes) <= 0.03 * target_bytes:
            break
        overhead = len(encode(build(group_size)))
        per_token = max(0.5, (size - overhead) / max(1, batch.num_completion_tokens - group_size))
        tokens = max(group_size, int((target_bytes - overhead) / per_token) + group_size)
    return batch


def bench_config(run_id: str, initial_peers: Sequence[str] = (), **timings: float):
    """A SwarmConfig listening on 127.0.0.1 only; ``timings`` override SwarmConfig fields."""
    from ftis.node.config import SwarmConfig

    return SwarmConfig(run_id=run_id, initial_peers=list(initial_peers), host_maddrs=["/ip4/127.0.0.1/tcp/0"],
                       **timings)


@dataclass
class ProcessTree:
    """The processes behind DHT peers: each DHT's forked child and the ``p2pd`` it started."""

    pids: dict[int, float] = field(default_factory=dict)  # pid -> create_time (a pid can be reused)

    def add_dht(self, dht) -> list[psutil.Process]:
        """Remember a started DHT's child and its ``p2pd``; returns them."""
        return self.add_pid(dht.pid)

    def add_pid(self, pid: int) -> list[psutil.Process]:
        """Remember a process (a DHT child) and its descendants (its ``p2pd``); returns them."""
        try:
            child = psutil.Process(pid)
            procs = [child, *child.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []
        for proc in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                self.pids[proc.pid] = proc.create_time()
        return procs

    def alive(self) -> list[psutil.Process]:
        alive = []
        for pid, created in self.pids.items():
            try:
                proc = psutil.Process(pid)
                if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.NoSuchProcess:
                pass
        return alive

    def reap(self, grace_s: float = 5.0) -> int:
        """Kill remembered processes still alive after ``grace_s``; returns how many had to be killed."""
        deadline = time.monotonic() + grace_s
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        stragglers = self.alive()
        for proc in stragglers:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        psutil.wait_procs(stragglers, timeout=5)
        return len(stragglers)


@dataclass(frozen=True)
class Memory:
    rss: int
    pss: int


def memory_of(procs: Sequence[psutil.Process]) -> Memory:
    """Summed RSS and PSS (proportional set size: shared pages divided among their sharers) of ``procs``."""
    rss = pss = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        rss += info.rss
        pss += getattr(info, "pss", info.rss)
    return Memory(rss, pss)


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def print_table(rows: list[tuple[str, ...]], header_rows: int = 1, left: int = 1) -> None:
    """Columns padded to width; the first ``left`` columns left-aligned, the rest right-aligned."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        cells = [cell.ljust(w) if i < left else cell.rjust(w) for i, (cell, w) in enumerate(
            zip(row, widths, strict=True))]
        print(" | ".join(cells).rstrip())
        if n == header_rows - 1:
            print("-+-".join("-" * w for w in widths))
