"""The in-memory transport: peers in one process, for tests and single-process demos.

A ``MemoryHub`` stands in for the DHT and the P2P streams. Announcements still travel as protocol
bytes and payloads are still checked (size, hash, strict decode) and filtered by the same ``Inbox``
as on the real swarm (``transport_base.py``), so code that works here behaves the same over hivemind. Fetching
happens inside ``receive``: synchronous, with no thread.
"""

import random
import threading
import time
from collections.abc import Callable

from ftis.node.swarm.exchange.inbox import Inbox
from ftis.node.swarm.exchange.limits import InboxLimits
from ftis.node.swarm.exchange.outbox import Outbox
from ftis.node.swarm.exchange.reasons import FETCH_FAILED
from ftis.node.swarm.peers.reputation import ReputationSettings
from ftis.node.swarm.transport import Member, ReceivedBatch, member_of
from ftis.node.swarm.transport_base import TransportBase, open_fetched
from ftis.protocol import DecodeError
from ftis.protocol.announcement import BatchDescriptor, Reach, decode_announcement, encode_announcement


class MemoryHub:
    """What the peers of one process share: their announcements and their payloads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._peers: dict[str, Outbox] = {}
        self._forged: dict[str, bytes] = {}  # peer id -> raw announcement bytes (tests of bad input)

    def join(self, peer_id: str, outbox: Outbox) -> None:
        with self._lock:
            self._peers[peer_id] = outbox

    def leave(self, peer_id: str) -> None:
        with self._lock:
            self._peers.pop(peer_id, None)
            self._forged.pop(peer_id, None)

    def put_raw_announcement(self, peer_id: str, data: bytes) -> None:
        """Announce arbitrary bytes as ``peer_id`` (what a hostile peer could store)."""
        with self._lock:
            self._forged[peer_id] = data

    def announcements(self) -> dict[str, bytes]:
        """Every peer's current announcement, as wire bytes."""
        with self._lock:
            peers, forged = dict(self._peers), dict(self._forged)
        result = {peer_id: encode_announcement(a) for peer_id, outbox in peers.items()
                  if (a := outbox.announcement()) is not None}
        return {**result, **forged}

    def fetch(self, peer_id: str, round_: int) -> bytes | None:
        with self._lock:
            outbox = self._peers.get(peer_id)
        return outbox.payload(round_) if outbox is not None else None


class MemoryTransport(TransportBase):
    def __init__(self, hub: MemoryHub, run_id: str, peer_id: str, tokenizer: str, limits: InboxLimits,
                 clock: Callable[[], float] = time.time, reputation: ReputationSettings | None = None,
                 fetch_budget: int = 0, tie_s: float = 1.0, rng: random.Random | None = None,
                 horizon_s: float = float("inf")):
        """``fetch_budget``, ``tie_s``, ``horizon_s``: as ``Inbox.choose`` takes them (0: every fresh batch)."""
        super().__init__(peer_id, Inbox(run_id, tokenizer, limits, clock, reputation),
                         Outbox(run_id, peer_id, clock=clock))
        self._hub = hub
        self._fetch_budget, self._tie_s, self._horizon_s = fetch_budget, tie_s, horizon_s
        self._rng = rng if rng is not None else random.Random()
        self._outbox.set_reach(Reach("direct"))  # in one process every peer reaches every other
        self._members: dict[str, Member] = {}
        hub.join(peer_id, self._outbox)

    def receive(self, max_batches: int | None = None) -> list[ReceivedBatch]:
        self._check_open()
        self._poll()
        return super().receive(max_batches)

    def poll_now(self) -> None:
        """As the DHT transport's poll, at once: the announcements read, the batches chosen fetched into the inbox."""
        self._check_open()
        self._poll()

    def _poll(self) -> None:
        admitted = []
        for peer_id, data in self._hub.announcements().items():
            if peer_id == self._peer_id:
                continue
            try:
                announcement = decode_announcement(data)
            except DecodeError:
                self._inbox.reject_announcement(peer_id, data)
                continue
            if announcement.peer_id != peer_id:  # on the DHT: signed by another key than peer_id's
                self._inbox.reject_announcement(peer_id, data)
                continue
            if not self._inbox.admit_announcement(announcement, data):
                continue
            self._members[peer_id] = member_of(announcement)
            if announcement.reach.how == "unreachable":  # as on the real swarm: no one could dial it
                continue
            admitted.append(announcement)
        for announcement, descriptor in self._inbox.choose(admitted, self._fetch_budget, self._tie_s, self._rng,
                                                              self._horizon_s):
            self._fetch(announcement.peer_id, descriptor)

    def _fetch(self, peer_id: str, descriptor: BatchDescriptor) -> None:
        data = self._hub.fetch(peer_id, descriptor.round)
        if data is None:
            self._inbox.fail(peer_id, descriptor, FETCH_FAILED)
            return
        batch = open_fetched(self._inbox, peer_id, descriptor, data)
        if batch is not None:  # else refused on its contents, and counted
            self._inbox.deliver(peer_id, descriptor, batch, len(data))

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._hub.leave(self._peer_id)

    def _peers(self) -> dict[str, Member]:
        return self._members

