"""The publishing side every transport shares: this node's recent batches, encoded once, and the
announcement that lists them. Only the newest ``keep`` batches are served and announced."""

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ftis.protocol import RolloutBatch, encode
from ftis.protocol.announcement import Announcement, BatchDescriptor, Reach
from ftis.protocol.limits import MAX_ANNOUNCED_BATCHES


class Outbox:
    def __init__(self, run_id: str, peer_id: str, keep: int = MAX_ANNOUNCED_BATCHES,
                 clock: Callable[[], float] = time.time):
        if not 1 <= keep <= MAX_ANNOUNCED_BATCHES:
            raise ValueError(f"keep must be in [1, {MAX_ANNOUNCED_BATCHES}], got {keep}")
        self._run_id, self._peer_id, self._keep, self._clock = run_id, peer_id, keep, clock
        self._lock = threading.Lock()
        self._payloads: OrderedDict[int, tuple[BatchDescriptor, bytes]] = OrderedDict()  # round -> (descriptor, bytes)
        self._latest: RolloutBatch | None = None
        self._reach = Reach()
        self._published_batches = self._published_tokens = self._published_bytes = 0

    def add(self, batch: RolloutBatch) -> BatchDescriptor:
        """Encode ``batch`` (it must be this node's, for this run, with a round above the last one)."""
        if batch.peer_id != self._peer_id or batch.run_id != self._run_id:
            raise ValueError(f"batch of peer {batch.peer_id!r}, run {batch.run_id!r}: this node is "
                             f"{self._peer_id!r} in run {self._run_id!r}")
        data = encode(batch)
        descriptor = describe(batch, data)
        with self._lock:
            if batch.round in self._payloads or (self._payloads and batch.round < next(reversed(self._payloads))):
                raise ValueError(f"round {batch.round} is not above the last one published")
            self._payloads[batch.round] = (descriptor, data)
            while len(self._payloads) > self._keep:
                self._payloads.popitem(last=False)
            self._latest = batch
            self._published_batches += 1
            self._published_tokens += descriptor.tokens
            self._published_bytes += descriptor.bytes
        return descriptor

    def set_reach(self, reach: Reach) -> None:
        """How peers reach this node, as its transport found out (said in every announcement from now on)."""
        with self._lock:
            self._reach = reach

    @property
    def reach(self) -> Reach:
        with self._lock:
            return self._reach

    def payload(self, round_: int) -> bytes | None:
        with self._lock:
            entry = self._payloads.get(round_)
            return entry[1] if entry else None

    def announcement(self) -> Announcement | None:
        """What to announce now; None before the first batch."""
        with self._lock:
            if self._latest is None:
                return None
            policy = self._latest.policy
            return Announcement(
                run_id=self._run_id,
                peer_id=self._peer_id,
                model=policy.model,
                adapter=policy.adapter,
                tokenizer=self._latest.tokenizer.fingerprint,
                policy_version=policy.policy_version,
                published_batches=self._published_batches,
                published_tokens=self._published_tokens,
                updated_at=self._clock(),
                batches=tuple(descriptor for descriptor, _ in self._payloads.values()),
                reach=self._reach,
            )

    @property
    def published(self) -> tuple[int, int]:
        """(batches, bytes) published so far."""
        with self._lock:
            return self._published_batches, self._published_bytes


def describe(batch: RolloutBatch, data: bytes) -> BatchDescriptor:
    """What an announcement says about ``batch``, whose encoded form is ``data``."""
    return BatchDescriptor(
        round=batch.round,
        groups=len(batch.groups),
        tokens=batch.num_completion_tokens,
        bytes=len(data),
        sha256=hashlib.sha256(data).digest(),
        policy_version=batch.policy.policy_version,
        created_at=batch.created_at,
    )

