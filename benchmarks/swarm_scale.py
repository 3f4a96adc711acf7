"""Swarm scale on one machine: N hivemind transports exchanging synthetic batches, for N = 8, 16, 32...

Run (from the repo root):  python -m benchmarks.swarm_scale [--peers 8,16,32] [--quick]
--peers: the swarm sizes, one after another (default 8,16,32, a few minutes on an idle 2-core machine;
64 adds several minutes); --quick: a sustained phase of one publish period instead of two.
--per-worker, --poll, --publish-period, --duration, --shards override the choices below; --shards-per-poll K,
--remember-polls R, --read-beam B, --max-shards-per-poll M turn sampled reads on (docs/swarm.md), e.g. --shards 64
--shards-per-poll 2 --remember-polls 32 --read-beam 2, with a 1 s poll by default. Sampled, a peer sees another's
batch within S/K polls (half that on average): the all-to-all figures measure that cycle, not what a node needs.

Per swarm size N, everything fresh: a bootstrap peer (``start_dht``, no announcements) in this
process, and N ``HivemindTransport`` peers with default settings except the poll interval, all on
127.0.0.1 in one run. Each transport is a forked DHT child process plus its ``p2pd``, so several
run in one host process: worker processes started with multiprocessing "spawn" (never fork after
hivemind has started DHTs), ``--per-worker`` transports each (default 16), each worker forking its
transports' DHT children as hivemind does. Batches are synthetic, 2 groups × 4 completions × 64
random tokens (~3 KB encoded).

1. Start: the workers start their transports one after another (workers in parallel), each joining
   through the bootstrap. "all up" is the wall time from spawning the workers until all N are up;
   "import" the slowest worker's import of hivemind (and torch); "per peer" the median
   ``HivemindTransport(...)`` call.
2. All-to-all: at one instant (DHT time, the same clock for all) every peer publishes one batch; each
   worker calls ``receive()`` on its transports every 5 ms. "all have all" is the time from that
   instant until every peer has every other peer's batch (N·(N−1) deliveries); the delivery latencies
   are ``received_at − created_at``. A fetch that fails (e.g. past its 10 s deadline on a saturated
   machine) is retried by the transport (``fetch_retries``, 2 by default) while the batch is fresh;
   one that still fails is "missing", and "all have all" is the time by which every other batch had
   arrived, marked "(not all)".
3. Memory, after the exchange: per peer, its DHT child + its ``p2pd`` + its share (1/k) of the host
   worker process holding k transports. RSS counts pages shared with the host (the DHT child is a
   fork of it) once per process; PSS divides shared pages among their sharers, so it is what a peer
   really costs (psutil's ``memory_full_info``).
4. Sustained: for ``--duration`` seconds (default two publish periods) every peer publishes a new
   batch every ``--publish-period`` seconds (default max(10, N/2) s), staggered, then receiving goes
   on for a grace period (2 polls + 5 s). Each transport's ``DHT.store`` and ``DHT.run_coroutine`` are
   wrapped (instance attributes, in the worker) to count and time the announcement stores
   (publish-triggered and the 5 s renewals) and the poll's reads (one per poll: all shard keys in one
   traversal). Reported: the announcements the swarm sustains, "announced/s" (new batches announced per
   second swarm-wide, N / period, over the publishing window; sustained when "delivered" is near 100%),
   swarm-wide stores/s and reads/s achieved with their p50 latency,
   deliveries/s and the fraction of expected deliveries that arrived, delivery latency p50/p95, and
   the CPU our processes used (cores busy, split into hosts, DHT children and p2pds) beside the whole
   machine's.

The poll interval is generous for large N: default max(2, N/2) s (4, 8, 16, 32 s for 8…64 peers).
Every poll reads all shard keys (4 by default) in one traversal that walks the DHT to up to
``bucket_size`` (20) nodes and asks each for ⌊√shards⌋ keys per request, so swarm-wide DHT requests
grow as N · ⌈shards / ⌊√shards⌋⌉ · min(N, 20) / poll; on this 2-core machine their CPU is the limit
(see the CPU columns), so the poll grows with N to keep that load roughly constant. At the end every
worker, DHT child and ``p2pd`` this run started is checked with psutil and, if any outlived
shutdown, killed by pid (other sessions' ``p2pd`` are never touched).
"""

import argparse
import contextlib
import math
import multiprocessing
import os
import random
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ftis.node.config import SwarmConfig

RUN_ID = "bench-scale"
BATCH = dict(groups=2, group_size=4, tokens_per_completion=64)
RECEIVE_EVERY_S = 0.005
CONVERGE_TIMEOUT_S = 120.0


# ---------------------------------------------------------------- the worker processes' side


@dataclass
class Calls:
    """Completed DHT calls of one transport: (monotonic end time, duration s, ok)."""

    store: list[tuple[float, float, bool]] = field(default_factory=list)
    read: list[tuple[float, float, bool]] = field(default_factory=list)  # ok: it returned (values or None)


def instrument(transport, calls: Calls) -> None:
    """Count and time the transport's DHT stores and shard reads (its announcer and poller call
    ``store`` and ``run_coroutine`` with ``return_future=True`` and await the result on the transport's
    loop; other ``run_coroutine`` calls, such as the peer id's, wait for it and are not counted)."""
    dht = transport._dht

    def wrap(method, log: list):
        def call(*args, **kwargs):
            started = time.monotonic()
            future = method(*args, **kwargs)
            if kwargs.get("return_future"):  # the transport awaits the future itself: time it on completion

                def done(future) -> None:  # runs on hivemind's future thread
                    ok = not future.cancelled() and future.exception() is None and future.result() is not False
                    log.append((time.monotonic(), time.monotonic() - started, ok))

                future.add_done_callback(done)
            return future

        return call

    dht.store = wrap(dht.store, calls.store)
    dht.run_coroutine = wrap(dht.run_coroutine, calls.read)


def sleep_until_dht_time(moment: float) -> None:
    from hivemind.utils import get_dht_time

    delay = moment - get_dht_time()
    if delay > 0:
        time.sleep(delay)


def worker_main(conn, index: int, count: int, config_fields: dict) -> None:
    """Host ``count`` transports; obey the coordinator's commands on ``conn``."""
    import logging

    logging.getLogger("hivemind").setLevel(logging.ERROR)
    from benchmarks.swarm_common import bench_config

    config = bench_config(**config_fields)
    transports, calls = [], []
    try:
        _serve(conn, config, count, transports, calls)
    except Exception as error:
        with contextlib.suppress(OSError):
            conn.send(("error", f"{type(error).__name__}: {error}"))
        raise
    finally:
        for transport in transports:
            transport.close()
        with contextlib.suppress(OSError):
            conn.send(("closed",))
            conn.close()


def _serve(conn, config, count: int, transports: list, calls: list) -> None:
    """Start the transports (appended to ``transports`` as they come up), then run the commands."""
    began = time.monotonic()
    from hivemind.utils import get_dht_time

    from benchmarks.swarm_common import synthetic_batch
    from ftis.node.swarm.dht.transport import HivemindTransport

    imported, start_times = time.monotonic() - began, []
    for _ in range(count):
        started = time.monotonic()
        transport = HivemindTransport(config, "bench-tokenizer")
        start_times.append(time.monotonic() - started)
        transports.append(transport)
        calls.append(Calls())
        instrument(transport, calls[-1])
        conn.send(("dht", transport._dht.pid))
    conn.send(("started", [t.peer_id for t in transports], imported, start_times))
    rounds = [0] * count

    def publish(i: int, created_at: float) -> None:
        transport = transports[i]
        transport.publish(synthetic_batch(config.run_id, transport.peer_id, rounds[i], created_at, **BATCH))
        rounds[i] += 1

    while True:
        command, *args = conn.recv()
        if command == "close":
            return
        if command == "converge":  # one batch each at one instant; receive until all have all
            moment, expected = args
            sleep_until_dht_time(moment)
            for i in range(count):
                publish(i, get_dht_time())
            have, failed, deliveries = [0] * count, [0] * count, []
            deadline = time.monotonic() + CONVERGE_TIMEOUT_S
            # until each has every batch, or has given up on the rest (after the transport's retries)
            while any(h + f < expected for h, f in zip(have, failed, strict=True)) and time.monotonic() < deadline:
                for i, transport in enumerate(transports):
                    for received in transport.receive():
                        have[i] += 1
                        deliveries.append((i, received.received_at, received.received_at - received.batch.created_at))
                    if have[i] + failed[i] < expected:
                        failed[i] = sum(transport.stats().rejections.values())
                time.sleep(RECEIVE_EVERY_S)
            conn.send(("converged", deliveries, have))
        elif command == "sustain":  # a batch every period each, staggered; then a grace period
            start, duration, period, grace, offsets = args
            sleep_until_dht_time(start)
            for log in calls:  # count only this phase's calls
                log.store.clear()
                log.read.clear()
            window_start = time.monotonic()
            due = [start + offset for offset in offsets]
            published, latencies = 0, []
            while get_dht_time() < start + duration + grace:
                now = get_dht_time()
                for i, transport in enumerate(transports):
                    if due[i] <= now and due[i] < start + duration:
                        publish(i, now)
                        published += 1
                        due[i] += period
                    for received in transport.receive():
                        if received.batch.created_at >= start:
                            latencies.append(received.received_at - received.batch.created_at)
                time.sleep(RECEIVE_EVERY_S)
            window = time.monotonic() - window_start
            stores = [c for log in calls for c in log.store]
            reads = [c for log in calls for c in log.read]
            rejections: dict[str, int] = {}
            for transport in transports:
                for (_, reason), n in transport.stats().rejections.items():
                    rejections[reason] = rejections.get(reason, 0) + n
            conn.send(("sustained", window, published, latencies, stores, reads, rejections))


# ---------------------------------------------------------------- the coordinator's side


@dataclass
class ScaleResult:
    peers: int
    workers: int
    poll_s: float
    start_s: float = math.nan  # until all N were up, from spawning the workers
    import_s: float = math.nan  # of that, a worker importing hivemind and torch (the slowest worker)
    transport_start_s: list[float] = field(default_factory=list)  # each HivemindTransport(...) call
    all_have_all_s: float = math.nan
    converge_latencies: list[float] = field(default_factory=list)
    missing: int = 0
    rss_per_peer: float = math.nan
    pss_per_peer: float = math.nan
    dht_pss: float = math.nan
    p2pd_pss: float = math.nan
    host_pss: float = math.nan
    period_s: float = math.nan
    duration_s: float = math.nan  # sustained phase: the publishing window (the grace period excluded)
    window_s: float = math.nan
    published: int = 0
    stores: list[tuple[float, float, bool]] = field(default_factory=list)
    reads: list[tuple[float, float, bool]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    cpu_cores: dict[str, float] = field(default_factory=dict)  # process kind -> cores busy
    machine_cpu: float = math.nan
    load: tuple[float, float, float] = (math.nan,) * 3
    rejections: dict[str, int] = field(default_factory=dict)  # reason -> count, whole run, all peers


class Worker:
    def __init__(self, context, index: int, count: int, config_fields: dict):
        self.conn, child = context.Pipe()
        self.process = context.Process(target=worker_main, args=(child, index, count, config_fields),
                                       name=f"swarm-worker-{index}")  # DHTs are its children: not daemonic
        self.process.start()
        child.close()
        self.count = count
        self.dht_pids: list[int] = []
        self.peer_ids: list[str] = []

    def expect(self, kind: str, timeout: float, tree=None) -> tuple:
        """The next message of ``kind`` (DHT pids reported on the way are collected)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.conn.poll(left):
                raise TimeoutError(f"worker {self.process.name}: no {kind!r} within {timeout:.0f} s")
            message = self.conn.recv()
            if message[0] == "dht":
                self.dht_pids.append(message[1])
                if tree is not None:
                    tree.add_pid(message[1])
                continue
            if message[0] == "error":
                raise RuntimeError(f"worker {self.process.name} failed: {message[1]}")
            if message[0] != kind:
                raise RuntimeError(f"worker {self.process.name}: expected {kind!r}, got {message[0]!r}")
            return message[1:]


def cpu_seconds(procs) -> float:
    total = 0.0
    for proc in procs:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except Exception:  # psutil.NoSuchProcess and friends: a process that ended
            pass
    return total


def run_scale(peers: int, args, tree) -> ScaleResult:
    import psutil
    from hivemind.utils import get_dht_time

    from benchmarks.swarm_common import bench_config, memory_of
    from ftis.node.swarm.dht.transport import start_dht

    # Sampled reads cost the same whatever the swarm's size: a fixed poll; full reads grow with N, and so does it.
    poll = args.poll if args.poll else (1.0 if args.shards_per_poll else max(2.0, peers / 2))
    period = args.publish_period if args.publish_period else max(10.0, peers / 2)
    duration = args.duration if args.duration else (10.0 if args.quick else max(20.0, period))
    per_worker = args.per_worker
    counts = [per_worker] * (peers // per_worker) + ([peers % per_worker] if peers % per_worker else [])
    result = ScaleResult(peers, len(counts), poll, period_s=period, duration_s=duration)
    scratch = Path(tempfile.mkdtemp(prefix="ftis-bench-"))
    bootstrap, workers = None, []
    try:
        # the bootstrap stores records too: its schema must know every shard key
        bootstrap, _ = start_dht(bench_config(RUN_ID, shards=args.shards), scratch / "bootstrap.key", announce=False)
        tree.add_dht(bootstrap)
        fields = dict(run_id=RUN_ID, initial_peers=[str(m) for m in bootstrap.get_visible_maddrs()],
                      poll_interval_s=poll, shards=args.shards, shards_per_poll=args.shards_per_poll,
                      remember_polls=args.remember_polls, read_beam_size=args.read_beam,
                      max_shards_per_poll=args.max_shards_per_poll)
        context = multiprocessing.get_context("spawn")
        started = time.monotonic()
        workers = [Worker(context, i, count, fields) for i, count in enumerate(counts)]
        for worker in workers:
            worker.peer_ids, imported, start_times = worker.expect("started", 60 + 10 * worker.count, tree)
            result.import_s = max(imported, 0 if math.isnan(result.import_s) else result.import_s)
            result.transport_start_s += start_times
        for worker in workers:  # p2pd children are there once a DHT is ready
            for pid in worker.dht_pids:
                tree.add_pid(pid)
        result.start_s = time.monotonic() - started

        # 2. all-to-all
        moment = get_dht_time() + 1.0
        for worker in workers:
            worker.conn.send(("converge", moment, peers - 1))
        deliveries, missing = [], 0
        for worker in workers:
            got, have = worker.expect("converged", CONVERGE_TIMEOUT_S + 30)
            deliveries += got
            missing += sum(peers - 1 - h for h in have)
        result.missing = missing
        result.converge_latencies = [latency for _, _, latency in deliveries]
        result.all_have_all_s = max((at for _, at, _ in deliveries), default=math.nan) - moment  # of those delivered

        # 3. memory
        hosts = [psutil.Process(worker.process.pid) for worker in workers]
        rss = pss = dht_pss = p2pd_pss = host_pss = 0
        for worker, host in zip(workers, hosts, strict=True):
            host_memory = memory_of([host])
            for pid in worker.dht_pids:
                child = psutil.Process(pid)
                child_memory, p2pd_memory = memory_of([child]), memory_of(child.children(recursive=True))
                rss += child_memory.rss + p2pd_memory.rss + host_memory.rss / worker.count
                pss += child_memory.pss + p2pd_memory.pss + host_memory.pss / worker.count
                dht_pss += child_memory.pss
                p2pd_pss += p2pd_memory.pss
                host_pss += host_memory.pss / worker.count
        result.rss_per_peer, result.pss_per_peer = rss / peers, pss / peers
        result.dht_pss, result.p2pd_pss, result.host_pss = dht_pss / peers, p2pd_pss / peers, host_pss / peers

        # 4. sustained
        grace = 2 * poll + 5.0
        dht_children = [psutil.Process(pid) for worker in workers for pid in worker.dht_pids]
        p2pds = [p for child in dht_children for p in child.children(recursive=True)]
        groups = {"host": hosts, "DHT": dht_children, "p2pd": p2pds}
        start = get_dht_time() + 1.0
        offsets = [period * i / peers for i in range(peers)]
        first = 0
        for worker in workers:
            worker.conn.send(("sustain", start, duration, period, grace, offsets[first:first + worker.count]))
            first += worker.count
        sleep_until_dht_time(start)
        cpu_before = {name: cpu_seconds(procs) for name, procs in groups.items()}
        wall_before = time.monotonic()
        psutil.cpu_percent()
        for worker in workers:
            window, published, latencies, stores, reads, rejections = worker.expect("sustained",
                                                                                    duration + grace + 60)
            for reason, n in rejections.items():
                result.rejections[reason] = result.rejections.get(reason, 0) + n
            result.window_s = max(window, 0 if math.isnan(result.window_s) else result.window_s)
            result.published += published
            result.latencies += latencies
            result.stores += stores
            result.reads += reads
        wall = time.monotonic() - wall_before
        result.cpu_cores = {name: (cpu_seconds(procs) - cpu_before[name]) / wall for name, procs in groups.items()}
        result.machine_cpu = psutil.cpu_percent() / 100 * (os.cpu_count() or 1)
        result.load = os.getloadavg()
        return result
    finally:
        for worker in workers:  # everything a worker started, even a DHT it had not reported yet
            with contextlib.suppress(psutil.NoSuchProcess):
                for proc in psutil.Process(worker.process.pid).children(recursive=True):
                    tree.add_pid(proc.pid)
            with contextlib.suppress(BrokenPipeError, OSError):
                worker.conn.send(("close",))
        for worker in workers:
            with contextlib.suppress(Exception):  # a worker that died or hangs: its processes are reaped below
                worker.expect("closed", 30 + 2 * worker.count)
            worker.process.join(10)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(5)
        if bootstrap is not None:
            bootstrap.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)


def mib(value: float) -> str:
    return f"{value / 2**20:.0f} MiB"


def ms(value: float) -> str:
    return f"{value * 1e3:.0f} ms" if not math.isnan(value) else "-"


def print_results(results: list[ScaleResult]) -> None:
    from benchmarks.swarm_common import percentile, print_table

    print("\nall-to-all exchange and memory (one batch per peer, published at one instant)")
    rows = [("peers", "workers", "poll", "all up", "import", "per peer", "all have all", "missing", "latency p50",
             "p95", "RSS/peer", "PSS/peer", "= DHT", "+ p2pd", "+ host share")]
    for r in results:
        rows.append((
            str(r.peers), str(r.workers), f"{r.poll_s:g} s", f"{r.start_s:.1f} s", f"{r.import_s:.1f} s",
            f"{statistics.median(r.transport_start_s):.2f} s",
            f"{r.all_have_all_s:.2f} s" + (" (not all)" if r.missing else ""),
            str(r.missing), ms(percentile(r.converge_latencies, 50)), ms(percentile(r.converge_latencies, 95)),
            mib(r.rss_per_peer), mib(r.pss_per_peer), mib(r.dht_pss), mib(r.p2pd_pss), mib(r.host_pss),
        ))  # fmt: skip
    print_table(rows)

    print("\nsustained exchange (each peer publishes every period; stores include the 5 s renewals)")
    rows = [("peers", "period", "window", "announced/s", "stores/s", "store p50", "failed", "reads/s", "read p50",
             "deliveries/s", "delivered", "latency p50", "p95", "CPU ours", "= hosts", "+ DHTs", "+ p2pds",
             "CPU machine", "load 1m")]
    for r in results:
        expected = r.published * (r.peers - 1)
        rows.append((
            str(r.peers), f"{r.period_s:g} s", f"{r.window_s:.0f} s", f"{r.published / r.duration_s:.2f}",
            f"{len(r.stores) / r.window_s:.1f}",
            ms(percentile([d for _, d, _ in r.stores], 50)), str(sum(1 for *_, ok in r.stores if not ok)),
            f"{len(r.reads) / r.window_s:.1f}", ms(percentile([d for _, d, _ in r.reads], 50)),
            f"{len(r.latencies) / r.window_s:.0f}", f"{len(r.latencies) / expected:.1%}" if expected else "-",
            ms(percentile(r.latencies, 50)), ms(percentile(r.latencies, 95)), f"{sum(r.cpu_cores.values()):.2f} cores",
            *(f"{r.cpu_cores[name]:.2f}" for name in ("host", "DHT", "p2pd")),
            f"{r.machine_cpu:.2f} cores", f"{r.load[0]:.1f}",
        ))  # fmt: skip
    print_table(rows)
    for r in results:
        if r.rejections:
            counts = ", ".join(f"{reason} {n}" for reason, n in sorted(r.rejections.items()))
            print(f"{r.peers} peers: receive-side refusals over the whole run (all peers): {counts}")
    print("RSS counts shared pages in every process; PSS shares them out (the fair cost). 'host share': 1/k of "
          "the worker process holding k transports. 'CPU ours': CPU seconds of the workers, DHT children and "
          "p2pds per wall second; 'CPU machine': every process on the machine (others' tests included).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers", default="8,16,32", help="swarm sizes, comma-separated (default 8,16,32)")
    parser.add_argument("--quick", action="store_true", help="a 10 s sustained phase")
    parser.add_argument("--per-worker", type=int, default=16, help="transports per worker process (default 16)")
    parser.add_argument("--poll", type=float, default=0.0, help="poll interval, s (default max(2, N/2))")
    parser.add_argument("--publish-period", type=float, default=0.0, help="sustained phase: s between a "
                        "peer's batches (default max(10, N/2))")
    parser.add_argument("--duration", type=float, default=0.0, help="sustained phase, s (default max(20 s, "
                        "one period); 10 with --quick)")
    parser.add_argument("--shards", type=int, default=SwarmConfig.model_fields["shards"].default,
                        help="announcement shard keys (default: SwarmConfig's, 4)")
    parser.add_argument("--shards-per-poll", type=int, default=0, help="K: shards a poll reads, the next K of each "
                        "peer's own order (default 0: all; sampled, the poll defaults to 1 s)")
    parser.add_argument("--remember-polls", type=int, default=1, help="polls a peer remembers (default 1)")
    parser.add_argument("--max-shards-per-poll", type=int, default=0, help="shards a poll may read while a peer "
                        "remembers fewer than 16 peers (default 0: shards-per-poll)")
    parser.add_argument("--read-beam", type=int, default=0, help="DHT read beam (default 0: hivemind's 20)")
    args = parser.parse_args()
    SwarmConfig(shards=args.shards, shards_per_poll=args.shards_per_poll, remember_polls=args.remember_polls,
                read_beam_size=args.read_beam, max_shards_per_poll=args.max_shards_per_poll)  # validated
    sizes = [int(size) for size in args.peers.split(",") if size.strip()]
    import logging

    logging.getLogger("hivemind").setLevel(logging.ERROR)
    began = time.monotonic()
    import hivemind

    from benchmarks.swarm_common import ProcessTree

    random.seed(0)
    load = os.getloadavg()
    print(f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start; "
          f"hivemind {hivemind.__version__}; batches of {BATCH['groups']} groups × {BATCH['group_size']} × "
          f"{BATCH['tokens_per_completion']} tokens; {args.shards} shard keys, "
          f"{args.shards_per_poll or 'all'} read per poll (up to {args.max_shards_per_poll or 'as many'} under 16 "
          f"peers), {args.remember_polls} remembered, beam "
          f"{args.read_beam or 20}; {args.per_worker} transports per worker process")
    results, tree = [], ProcessTree()
    try:
        for peers in sizes:
            size_began = time.monotonic()
            try:
                result = run_scale(peers, args, tree)
            except Exception as error:  # report what finished; larger swarms would fail the same way
                print(f"{peers} peers: FAILED after {time.monotonic() - size_began:.0f} s: "
                      f"{type(error).__name__}: {error}", flush=True)
                break
            results.append(result)
            print(f"{peers} peers: {time.monotonic() - size_began:.0f} s (all up {result.start_s:.1f} s, "
                  f"all have all {result.all_have_all_s:.2f} s, sustained latency p50 "
                  f"{statistics.median(result.latencies or [math.nan]):.2f} s)", flush=True)
    finally:
        killed = tree.reap()
    if results:
        print_results(results)
    alive = [proc.pid for proc in tree.alive()]
    print(f"\n{time.monotonic() - began:.0f} s in all; {len(tree.pids)} worker, DHT and p2pd processes started, "
          + (f"{len(alive)} STILL RUNNING: {alive}" if alive else "none left")
          + (f" ({killed} killed after shutdown)" if killed else ""))


if __name__ == "__main__":
    main()
