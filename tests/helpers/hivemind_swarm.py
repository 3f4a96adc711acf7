"""The plumbing of the real-swarm tests (marker ``hivemind``): transports on 127.0.0.1 around a
bootstrap DHT peer, what each has received, polling until a condition holds, and killing a process
with the orphans it leaves.

A test module starts one ``Swarm`` for all its tests (a DHT peer takes about a second to start) with
its own settings; every node ages batches by a clock of its own (``ShiftedClock``) that a test moves on
instead of sleeping, and every wait polls until its condition holds, under a deadline that only a broken
(or badly overloaded) swarm reaches.
"""

import contextlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import hivemind
import psutil
import pytest
from hivemind.utils import get_dht_time

from ftis.node.config import SwarmConfig
from ftis.node.swarm.dht.transport import HivemindTransport, start_dht
from ftis.node.swarm.transport import ReceivedBatch
from ftis.protocol import RolloutBatch
from helpers.swarm import TOKENIZER, ShiftedClock, make_batch

DEADLINE_S = 60.0  # the longest any wait may take; waits end as soon as their condition holds
JOIN_DEADLINE_S = 90.0  # a new process imports torch first: ~3 s idle, far longer on a loaded machine

# (peer id, round, created_at, run_id=...) -> a batch of that peer: ``helpers.swarm.make_batch`` or alike
BatchBuilder = Callable[..., RolloutBatch]


class Peer:
    """A transport and everything it has received so far: tests share peers, so nothing gets lost."""

    def __init__(self, transport: HivemindTransport, clock: ShiftedClock, run_id: str):
        self.transport, self.clock, self.run_id = transport, clock, run_id
        self.peer_id = transport.peer_id
        self.log: list[ReceivedBatch] = []  # in order of delivery
        self.next_round = 0

    def publish(self, created_at: float | None = None, build: BatchBuilder = make_batch) -> RolloutBatch:
        batch = build(self.peer_id, self.next_round, get_dht_time() if created_at is None else created_at,
                      run_id=self.run_id)
        self.next_round += 1
        self.transport.publish(batch)
        return batch

    def poll(self) -> None:
        self.log += self.transport.receive()

    def got(self, peer_id: str) -> list[int]:
        """The rounds of the batches delivered from ``peer_id``, in order, repeats included."""
        return [r.batch.round for r in self.log if r.peer_id == peer_id]

    def rejections(self, peer_id: str) -> dict[str, int]:
        return rejections_of(self.transport, peer_id)


def rejections_of(transport: HivemindTransport, peer_id: str) -> dict[str, int]:
    """The transport's refusals of ``peer_id``'s batches and announcements, by reason."""
    return {reason: n for (peer, reason), n in transport.stats().rejections.items() if peer == peer_id}


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {reason: n - before.get(reason, 0) for reason, n in after.items() if n != before.get(reason, 0)}


class Swarm:
    """A bootstrap peer and the transports joined through it; ``nodes`` are the peers ``wait_until`` polls."""

    def __init__(self, bootstrap: hivemind.DHT, settings: dict[str, object]):
        self.bootstrap = bootstrap
        self.maddrs = [str(maddr) for maddr in bootstrap.get_visible_maddrs()]
        self.config = SwarmConfig(**settings, initial_peers=self.maddrs)
        self.nodes: list[Peer] = []
        self._unpolled: list[Peer] = []  # closed with the swarm, drained only by their owner

    def join(self, n: int, *, tokenizer: str = TOKENIZER, polled: bool = True, **settings: object) -> list[Peer]:
        """n new peers, joined in parallel (a DHT peer takes about a second to start); ``settings``
        override the swarm's config. A peer that is not ``polled`` keeps what it receives for its owner
        (a training node drains its own transport)."""
        config = self.config.model_copy(update=settings)

        def start(_: int) -> Peer:
            clock = ShiftedClock(get_dht_time)
            peer = Peer(HivemindTransport(config, tokenizer, clock=clock), clock, config.run_id)
            (self.nodes if polled else self._unpolled).append(peer)  # at once: close() ends it if a sibling fails
            return peer

        with ThreadPoolExecutor(n) as pool:
            return list(pool.map(start, range(n)))

    def leave(self, peer: Peer) -> None:
        self.nodes.remove(peer)
        peer.transport.close()

    def wait_until(self, condition: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> float:
        """Poll every polled peer until ``condition()`` holds; returns the seconds it took."""
        started = time.monotonic()
        while True:
            for peer in self.nodes:
                peer.poll()
            if condition():
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                pytest.fail(f"not within {timeout:.0f} s: {what}")
            time.sleep(0.05)

    def close(self) -> None:
        everyone = [*self.nodes, *self._unpolled]
        with ThreadPoolExecutor(max(1, len(everyone))) as pool:
            list(pool.map(lambda peer: peer.transport.close(), everyone))
        self.bootstrap.shutdown()


def start_bootstrap(folder: Path, settings: dict[str, object]) -> hivemind.DHT:
    dht, _ = start_dht(SwarmConfig(**settings), folder / "bootstrap.key", announce=False)
    return dht


def kill_tree(pid: int) -> None:
    """SIGKILL a process, then the DHT process and ``p2pd`` it leaves running as orphans (a machine
    going down takes them all). The caller reaps ``pid`` itself (``Popen.wait``, ``Process.join``)."""
    root = psutil.Process(pid)
    orphans = root.children(recursive=True)
    root.kill()
    for process in orphans:
        with contextlib.suppress(psutil.NoSuchProcess):
            process.kill()
    # Dead once they are zombies: the orphans' new parent (PID 1 here) reaps them in its own time.
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in orphans) and time.monotonic() < deadline:
        time.sleep(0.02)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
