"""What the inbox holds and counts of its peers' batches, apart from deciding which to take: each batch in flight or
queued charged to its peer's quota and to the buffer's bytes (``Charges``), and every refusal counted by peer and
reason, in a table bounded in the peers it names (``Tally``). Neither locks: the ``Inbox`` calls them under its own
lock."""

from collections import OrderedDict
from collections.abc import Iterator, Mapping

from ftis.node.swarm.transport import TransportStats

Key = tuple[str, int]  # (peer id, round)

# The rejections of peers dropped from the by-peer counts, summed under this name: the counts by reason stay whole.
OTHER_PEERS = "(other peers)"


class Charges(Mapping[Key, int]):
    """The batches in flight or queued, each at the bytes it is charged (its announced size until it is fetched,
    then what decoding it takes), their sum, and their count by peer."""

    def __init__(self) -> None:
        self._sizes: dict[Key, int] = {}
        self._bytes = 0
        self._by_peer: dict[str, int] = {}  # peers with none left out

    def __getitem__(self, key: Key) -> int:
        return self._sizes[key]

    def __iter__(self) -> Iterator[Key]:
        return iter(self._sizes)

    def __len__(self) -> int:
        return len(self._sizes)

    @property
    def bytes(self) -> int:
        return self._bytes

    def of_peer(self, peer_id: str) -> int:
        """How many of ``peer_id``'s batches are held (its quota's use)."""
        return self._by_peer.get(peer_id, 0)

    def hold(self, key: Key, size: int) -> None:
        """Charge a batch to its peer's quota and to the buffer, at ``size`` bytes."""
        self._sizes[key] = size
        self._bytes += size
        self._by_peer[key[0]] = self._by_peer.get(key[0], 0) + 1

    def recharge(self, key: Key, size: int) -> None:
        """A held batch charged ``size`` bytes in place of what it was (nothing if it is not held)."""
        if key in self._sizes:
            self._bytes += size - self._sizes[key]
            self._sizes[key] = size

    def release(self, key: Key) -> None:
        """Free what ``hold`` charged (nothing if it is not held)."""
        size = self._sizes.pop(key, None)
        if size is None:
            return
        self._bytes -= size
        left = self._by_peer.pop(key[0]) - 1
        if left:
            self._by_peer[key[0]] = left


class Tally:
    """Deliveries and rejections as ``TransportStats`` counts them: rejections by (peer, reason); past
    ``max_peers`` peers, the one refused longest ago has its counts moved to ``OTHER_PEERS``."""

    def __init__(self, max_peers: int) -> None:
        self._max_peers = max_peers
        self._stats = TransportStats()
        self._reasons: OrderedDict[str, set[str]] = OrderedDict()  # peer -> its reasons, the newest peers last

    def delivered(self, payload_bytes: int) -> None:
        self._stats.delivered_batches += 1
        self._stats.delivered_bytes += payload_bytes

    def refused(self, peer_id: str, reason: str) -> None:
        rejections = self._stats.rejections
        rejections[(peer_id, reason)] = rejections.get((peer_id, reason), 0) + 1
        reasons = self._reasons.pop(peer_id, set())
        reasons.add(reason)
        self._reasons[peer_id] = reasons
        while len(self._reasons) > self._max_peers:
            dropped, its_reasons = self._reasons.popitem(last=False)
            for why in its_reasons:
                rejections[(OTHER_PEERS, why)] = rejections.get((OTHER_PEERS, why), 0) + rejections.pop((dropped, why))

    def stats(self) -> TransportStats:
        """A copy: the counts so far."""
        return TransportStats(delivered_batches=self._stats.delivered_batches,
                              delivered_bytes=self._stats.delivered_bytes, rejections=dict(self._stats.rejections))
