"""The one small interface the node uses to reach the swarm, and what it hands back.

Implementations: ``HivemindTransport`` (``dht/transport.py``, the real one: DHT announcements
and P2P streams) and ``MemoryTransport`` (``memory.py``, in one process, for tests and demos).
Both apply the same receive policy (``inbox.py``) through the same base (``transport_base.py``) and pass
the same contract tests.
"""

from dataclasses import dataclass, field
from typing import Protocol

from ftis.node.swarm.peers.peer_rounds import PeerRounds
from ftis.node.swarm.peers.reputation import PeerScore
from ftis.node.swarm.reach.p2pd_metrics import RelayCounters
from ftis.protocol import RolloutBatch
from ftis.protocol.announcement import Announcement, BatchDescriptor


@dataclass(frozen=True)
class ReceivedBatch:
    peer_id: str  # who published it (checked against the signed announcement)
    batch: RolloutBatch
    payload_bytes: int
    received_at: float  # unix seconds


@dataclass(frozen=True)
class Member:
    """A swarm member as its latest announcement describes it."""

    peer_id: str
    model: str
    adapter: str
    tokenizer: str
    policy_version: int
    published_batches: int
    published_tokens: int
    last_seen: float  # unix seconds of its latest announcement
    reach: str = "unknown"  # how it says peers reach it (protocol.limits.REACH_HOW)
    relays: tuple[str, ...] = ()  # when relayed: the peer ids of the relays that hold a slot for it


@dataclass
class TransportStats:
    published_batches: int = 0
    published_bytes: int = 0
    delivered_batches: int = 0
    delivered_bytes: int = 0
    rejections: dict[tuple[str, str], int] = field(default_factory=dict)  # (peer id, reason) -> count
    serves_turned_away: int = 0  # requests for our payloads refused for lack of a serving slot (swarm/dht/slots.py)
    announce_failures: int = 0  # announcements no DHT peer stored, or that failed
    poll_failures: int = 0  # reads of the peers' announcements that failed
    reach: str = "unknown"  # how peers reach this node, as it announces it (protocol.limits.REACH_HOW)
    relayed_received_bytes: int = 0  # of delivered_bytes: payloads fetched through a relay
    relayed_sent_bytes: int = 0  # payload bytes served through a relay
    relay: RelayCounters | None = None  # libp2p's own counts (p2pd_metrics.py); None where not read

    def rejected(self, reason: str) -> int:
        return sum(count for (_, why), count in self.rejections.items() if why == reason)


class Transport(Protocol):
    @property
    def peer_id(self) -> str: ...

    def publish(self, batch: RolloutBatch) -> BatchDescriptor:
        """Make ``batch`` available to the swarm; returns at once (the network work happens elsewhere)."""
        ...

    def receive(self, max_batches: int | None = None) -> list[ReceivedBatch]:
        """Peers' batches delivered since the last call, oldest first; never blocks."""
        ...

    def set_round(self, round_: int, ahead: int) -> None:
        """Rounds mode: this node is at round ``round_``. ``receive`` hands over batches of that round or earlier and
        keeps later ones (charged to their peer's quota and the buffer until this node reaches their round, dropped
        at ``swarm.max_age_s``); none more than ``ahead`` rounds later is fetched. Never called: every batch."""
        ...

    def peer_rounds(self) -> PeerRounds:
        """Each peer's newest round delivered (handed over or held) and announced (``peer_rounds.py``)."""
        ...

    def poll_now(self) -> None:
        """A hint to read peers' announcements now rather than at the next period (rounds mode, while it waits
        for a round's batches); returns at once."""
        ...

    def members(self) -> list[Member]:
        """The swarm's members (this node included) as last seen."""
        ...

    def stats(self) -> TransportStats:
        """A snapshot of counters: published, delivered, and rejections by peer and reason."""
        ...

    def report_filtered(self, peer_id: str, batches: int, completions: int, filtered: int) -> None:
        """Evidence for the peer's score: a step trained on ``completions`` of its completions, drawn from
        ``batches`` of its batches, and the divergence filter dropped ``filtered`` of them (``reputation.py``)."""
        ...

    def report_fault(self, peer_id: str, reason: str) -> None:
        """Evidence for the peer's score found by the node itself: a delivered batch at fault once read
        (``inbox.PROMPT_MISMATCH``, ``inbox.NONFINITE``) or a round it missed (``inbox.MISSED_ROUND``,
        ``inbox.LATE_ROUND``); counted in ``stats().rejections`` by reason."""
        ...

    def scores(self) -> dict[str, PeerScore]:
        """Every peer this node has evidence about, as it judges it now: score, evidence, muted until."""
        ...

    def close(self) -> None:
        """Stop all network work and release everything; idempotent."""
        ...


def member_of(announcement: Announcement) -> Member:
    return Member(
        peer_id=announcement.peer_id,
        model=announcement.model,
        adapter=announcement.adapter,
        tokenizer=announcement.tokenizer,
        policy_version=announcement.policy_version,
        published_batches=announcement.published_batches,
        published_tokens=announcement.published_tokens,
        last_seen=announcement.updated_at,
        reach=announcement.reach.how,
        relays=announcement.reach.relays,
    )
