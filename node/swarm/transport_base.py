"""What every transport does the same way with its inbox and outbox, written once.

A transport is two halves. How announcements and payloads travel is its own: a hub in one process
(``memory.py``), a DHT and P2P streams (``dht/transport.py``). What it does with them is not, and lives here:

- ``TransportBase`` holds the node's ``Outbox`` (its recent batches and the announcement listing them) and its
  ``Inbox`` (the receive policy, the delivered batches, the peers' scores), and answers from them the part of
  ``Transport`` that involves no network: ``publish`` into the outbox, ``receive`` out of the inbox (rounds mode:
  ``set_round``, ``peer_rounds``), ``members``, ``stats``, ``scores`` and the evidence the node reports about its
  peers. A transport adds where its peers'
  announcements come from (``_peers``) and what its network counts (by extending ``stats``).
- ``open_fetched`` takes a payload a transport fetched through the inbox (size, hash, charged what decoding
  takes, strict decode); ``refuse`` counts a payload refused on its contents against its peer. The transport
  then hands the batch to ``Inbox.deliver``.

So every transport charges, counts and scores the same payloads the same way, and the contract tests
(``tests/test_transport_contract.py``) hold each to it. Subclassed one level deep, by ``MemoryTransport`` and
``HivemindTransport`` (the experiment's ``LockstepTransport`` is a ``MemoryTransport``).
"""

import logging

from ftis.node.swarm.exchange.inbox import Inbox
from ftis.node.swarm.exchange.outbox import Outbox
from ftis.node.swarm.exchange.payload import Rejected
from ftis.node.swarm.peers.peer_rounds import PeerRounds
from ftis.node.swarm.peers.reputation import PeerScore
from ftis.node.swarm.transport import Member, ReceivedBatch, TransportStats, member_of
from ftis.protocol import RolloutBatch
from ftis.protocol.announcement import BatchDescriptor

logger = logging.getLogger(__name__)


class TransportBase:
    def __init__(self, peer_id: str, inbox: Inbox, outbox: Outbox):
        self._peer_id, self._inbox, self._outbox = peer_id, inbox, outbox
        self._closed = False  # set by the transport's close(); publish and receive refuse from then on

    @property
    def peer_id(self) -> str:
        return self._peer_id

    def publish(self, batch: RolloutBatch) -> BatchDescriptor:
        self._check_open()
        return self._outbox.add(batch)

    def receive(self, max_batches: int | None = None) -> list[ReceivedBatch]:
        self._check_open()
        return self._inbox.drain(max_batches)

    def set_round(self, round_: int, ahead: int) -> None:
        self._inbox.set_round(round_, ahead)

    def peer_rounds(self) -> PeerRounds:
        return self._inbox.peer_rounds()

    def members(self) -> list[Member]:
        """The peers as last read, plus this node once it has published, by peer id."""
        members = dict(self._peers())
        own = self._outbox.announcement()
        if own is not None:
            members[self._peer_id] = member_of(own)
        return sorted(members.values(), key=lambda m: m.peer_id)

    def stats(self) -> TransportStats:
        """What the inbox received and refused, what the outbox published; a network transport adds its own."""
        stats = self._inbox.stats()
        stats.published_batches, stats.published_bytes = self._outbox.published
        stats.reach = self._outbox.reach.how
        return stats

    def report_filtered(self, peer_id: str, batches: int, completions: int, filtered: int) -> None:
        self._inbox.report_filtered(peer_id, batches, completions, filtered)

    def report_fault(self, peer_id: str, reason: str) -> None:
        self._inbox.report_fault(peer_id, reason)

    def scores(self) -> dict[str, PeerScore]:
        return self._inbox.scores()

    def _peers(self) -> dict[str, Member]:
        """The swarm's other members as this transport last read their announcements."""
        raise NotImplementedError

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the transport is closed")


def open_fetched(inbox: Inbox, peer_id: str, descriptor: BatchDescriptor, data: bytes) -> RolloutBatch | None:
    """The batch in a payload fetched from ``peer_id`` (``Inbox.open``: exactly the announced bytes, charged what
    decoding takes, strictly decoded); None when refused, the refusal counted against the peer (``refuse``).
    Runs in the caller's thread: a network transport's decoding thread."""
    try:
        return inbox.open(peer_id, descriptor, data)
    except Rejected as rejected:
        refuse(inbox, peer_id, descriptor, rejected)
        return None


def refuse(inbox: Inbox, peer_id: str, descriptor: BatchDescriptor, rejected: Rejected) -> None:
    """A payload refused on what the peer sent: counted by its reason, never asked for again."""
    inbox.fail(peer_id, descriptor, rejected.reason)
    logger.info("refused batch %s of %s: %s", descriptor.round, peer_id, rejected)
