"""Nodes stepped in lockstep in one process: every node of a swarm runs its round in a thread of its own,
and publishing waits until all of them have published, so each node's step trains on exactly its peers'
batches of the same round.

    swarms = [[node_a, node_b, node_c]]            # built on LockstepSwarm(...).transport(...)
    reports = step_round([node_a, node_b, node_c])  # one round of each, in parallel; reports in order

Why threads and a barrier rather than calling the nodes one after another: called in turn, the first node
of a round would train on its peers' batches of the previous round and the last on this round's, an
asymmetry the grid must not carry. With the barrier the exchange is the one a ``rounds``-mode swarm over
the network has, without its waiting: the in-memory transport applies the same checks to the same wire
bytes, so this is the networked node's code minus the network. The threads also use both cores: torch
releases the GIL inside its kernels (run with ``torch.set_num_threads(1)`` so the threads do not
oversubscribe the cores).

Reproducibility: each node draws from its own seeded generators, so a cell's result does not depend on
thread timing, except for the order in which peers' groups enter a step (the mix orders them by batch
creation time), which changes floating-point summation order only.
"""

import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from ftis.node.config import SwarmConfig
from ftis.node.records.round_report import RoundReport
from ftis.node.runner.node import Node
from ftis.node.swarm.exchange.limits import InboxLimits, inbox_limits
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.node.swarm.peers.reputation import ReputationSettings, reputation_settings
from ftis.protocol import RolloutBatch
from ftis.protocol.announcement import BatchDescriptor

T = TypeVar("T")
BARRIER_TIMEOUT_S = 600.0  # a node that has not published after this long is stuck: fail the round


class LockstepError(RuntimeError):
    """A node of the swarm failed or stalled during a round; the message names it."""


class SwarmMember(Protocol):
    """A member of a lockstep swarm besides its nodes (``benchmarks/poisoning.py``: an attacker). Its
    ``run_round`` must publish exactly one batch on its ``LockstepSwarm`` transport, as a node's does."""

    def run_round(self) -> object: ...

    def close(self) -> None: ...


class LockstepSwarm:
    """One in-memory swarm of ``size`` nodes whose publishes meet at a barrier each round."""

    def __init__(self, size: int, swarm: SwarmConfig):
        self.hub = MemoryHub()
        self.barrier = threading.Barrier(size, timeout=BARRIER_TIMEOUT_S)
        self._limits = inbox_limits(swarm)
        self._run_id = swarm.run_id
        self._reputation = reputation_settings(swarm)

    def transport(self, peer_id: str, tokenizer: str) -> "LockstepTransport":
        return LockstepTransport(self.barrier, self.hub, self._run_id, peer_id, tokenizer, self._limits,
                                 reputation=self._reputation)


class LockstepTransport(MemoryTransport):
    """A ``MemoryTransport`` whose ``publish`` returns once every node of the swarm has published."""

    def __init__(self, barrier: threading.Barrier, hub: MemoryHub, run_id: str, peer_id: str, tokenizer: str,
                 limits: InboxLimits, clock: Callable[[], float] = time.time,
                 reputation: ReputationSettings | None = None):
        super().__init__(hub, run_id, peer_id, tokenizer, limits, clock=clock, reputation=reputation)
        self._barrier = barrier

    def publish(self, batch: RolloutBatch) -> BatchDescriptor:
        descriptor = super().publish(batch)
        try:
            self._barrier.wait()
        except threading.BrokenBarrierError:
            raise LockstepError(f"{self.peer_id}: a peer failed or stalled before publishing round {batch.round}") \
                from None
        return descriptor


def step_round(nodes: Sequence[Node], barriers: Sequence[threading.Barrier] = (),
               members: Sequence[SwarmMember] = ()) -> list[RoundReport]:
    """One round of every node and every other member, each in its own thread; the nodes' reports in their
    order. If one raises, ``barriers`` are broken so that its peers stop waiting, and the first error is
    raised here."""
    results = in_parallel([*(node.run_round for node in nodes), *(member.run_round for member in members)],
                          barriers)
    return results[: len(nodes)]


def in_parallel(calls: Sequence[Callable[[], T]], barriers: Sequence[threading.Barrier] = ()) -> list[T]:
    """``calls`` run at once, one thread each; their results in order. The first error (other than a
    ``LockstepError`` it caused in a peer) is raised once all threads are done; ``barriers`` are broken
    when one fails. Daemon threads: Ctrl-C in the caller is not held up by a running node."""
    results: list[T | None] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            results[k] = calls[k]()
        except BaseException as error:  # re-raised in the caller's thread below
            errors.append(error)
            for barrier in barriers:
                barrier.abort()

    threads = [threading.Thread(target=run, args=(k,), name=f"lockstep-{k}", daemon=True) for k in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise next((e for e in errors if not isinstance(e, LockstepError)), errors[0])
    return results  # type: ignore[return-value]  # every slot was filled: no call raised
