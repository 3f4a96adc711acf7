"""Each peer's newest round as this node knows it, for rounds mode (``intake/rounds_barrier.py``).

Two figures per peer, both the peer's own claims (the barrier decides what they are worth):

- delivered: the newest round of a batch of it this node fetched and checked, whether handed to the node or held in
  the inbox until the node reaches that round;
- announced: the newest round among the fresh batches its latest signed announcement lists. A batch more rounds
  ahead than the node fetches (``loop.rounds_ahead``) is known only so; replaced at each reading, so a peer that
  stops listing a round stops claiming it.

Bounded: each figure is kept for the ``max_peers`` peers heard from last.
"""

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class PeerRounds:
    """A snapshot: peer id -> round."""

    delivered: dict[str, int]
    announced: dict[str, int]

    def newest(self, peer_id: str) -> int:
        """The newest round the peer delivered or announced; -1 for none."""
        return max(self.delivered.get(peer_id, -1), self.announced.get(peer_id, -1))


class RoundBook:
    """The figures above, kept as they come; not thread-safe (the ``Inbox`` calls it under its lock)."""

    def __init__(self, max_peers: int):
        self._max_peers = max_peers
        self._delivered: OrderedDict[str, int] = OrderedDict()
        self._announced: OrderedDict[str, int] = OrderedDict()

    def delivered(self, peer_id: str, round_: int) -> None:
        _put(self._delivered, peer_id, max(round_, self._delivered.get(peer_id, -1)), self._max_peers)

    def announced(self, peer_id: str, round_: int) -> None:
        _put(self._announced, peer_id, round_, self._max_peers)

    def snapshot(self) -> PeerRounds:
        return PeerRounds(dict(self._delivered), dict(self._announced))


def _put(table: OrderedDict[str, int], peer_id: str, round_: int, max_peers: int) -> None:
    table.pop(peer_id, None)
    table[peer_id] = round_  # the newest last
    while len(table) > max_peers:
        table.popitem(last=False)
