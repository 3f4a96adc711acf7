"""The inbox's seen set: each (peer, round) it has answered, so a batch is fetched at most once and a refusal is
counted once, in memory bounded however many batches peers list.

An entry holds the batch's date (its creation time, as ``Inbox.consider`` records it) and stays until that date is
``max_age_s`` old (the batch would be refused as stale anyway), with at most ``per_peer`` entries of one peer and
``total`` in all: past those, the entry seen first goes first (the peer's own, or anyone's). Entries of batches in
flight or queued (``held``) are kept: they move behind the others instead.

A forgotten entry leaves its peer a watermark, the newest date among its forgotten entries (``answered``): a
batch no newer that the peer still lists was answered already, or is stale anyway, and is not considered again. A
batch already stale when first seen only raises its peer's watermark. The watermarks of the ``max_peers`` peers
forgotten from last are kept.

Entries are kept in the order they were first seen, and pruning only ever looks at the first: it stops at the first
entry that is still fresh. So an entry goes at most ``max_age_s`` + ``MAX_CLOCK_AHEAD_S`` after it was first seen (no
date is recorded further ahead than that), and pruning costs what it drops (and moves back), never a scan: a poll of
a large swarm considers thousands of batches on the network loop.

Not thread-safe: the ``Inbox`` calls it under its lock.
"""

import math
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Mapping

Key = tuple[str, int]  # (peer id, round)
Held = Mapping[Key, int]  # the batches in flight or queued (the inbox's ``_pending``): key -> bytes


class SeenSet:
    def __init__(self, max_age_s: float, per_peer: int, total: int, max_peers: int):
        self._max_age_s, self._per_peer, self._total, self._max_peers = max_age_s, per_peer, total, max_peers
        self._dates: OrderedDict[Key, float] = OrderedDict()  # the entries, first seen first
        self._rounds: dict[str, deque[int]] = {}  # peer -> its entries' rounds, in the same order
        # Refused only for now (no room, or a round too far ahead): asked about again at each poll, counted once.
        self.deferred: set[Key] = set()
        self.watermarks: OrderedDict[str, float] = OrderedDict()  # peer -> newest date forgotten; newest peers last

    def __len__(self) -> int:
        return len(self._dates)

    def __iter__(self) -> Iterator[Key]:
        return iter(self._dates)

    def __contains__(self, key: object) -> bool:
        return key in self._dates

    def answered(self, key: Key, date: float) -> bool:
        """Whether the batch ``key``, dated ``date``, has its final answer: seen and not deferred, or no newer than
        its peer's watermark."""
        if key in self._dates and key not in self.deferred:
            return True
        return date <= self.watermarks.get(key[0], -math.inf)

    def add(self, key: Key, date: float, now: float, held: Held) -> None:
        """Remember ``key`` (not in the set) as dated ``date``; past the bounds, the entries seen first go."""
        peer, round_ = key
        if date < now - self._max_age_s:  # stale for good, and so is every batch of the peer's no newer
            self._raise_watermark(peer, date)
            return
        self._dates[key] = date
        rounds = self._rounds.setdefault(peer, deque())
        rounds.append(round_)
        if len(rounds) > self._per_peer:
            self._shed(lambda: (peer, rounds[0]), held)
        if len(self._dates) > self._total:
            self._shed(lambda: next(iter(self._dates)), held)

    def defer(self, key: Key) -> bool:
        """Mark ``key`` as refused for now; whether it was not already (a refusal to count)."""
        if key in self.deferred:
            return False
        self.deferred.add(key)
        return True

    def settle(self, key: Key) -> None:
        """``key`` has its final answer."""
        self.deferred.discard(key)

    def prune(self, now: float, held: Held) -> None:
        """Forget the entries whose date is more than ``max_age_s`` before ``now``, from the first seen on, up to
        the first that is not."""
        cutoff = now - self._max_age_s
        moved = 0
        while self._dates and moved <= len(held):
            key, date = next(iter(self._dates.items()))
            if key in held:  # a batch in flight or queued neither goes nor holds the others back
                self._move_back(key)
                moved += 1
            elif date < cutoff:
                self._forget(key)
            else:
                return

    def _shed(self, oldest: Callable[[], Key], held: Held) -> None:
        """Forget the entry ``oldest()`` names, or, while it is held, move it back and try the next."""
        for _ in range(len(held) + 1):
            key = oldest()
            if key not in held:
                self._forget(key)
                return
            self._move_back(key)

    # Both take the first entry of its peer (the first of all is its peer's first): the two orders stay the same.
    def _forget(self, key: Key) -> None:
        peer = key[0]
        date = self._dates.pop(key)
        rounds = self._rounds[peer]
        rounds.popleft()
        if not rounds:
            del self._rounds[peer]
        self.deferred.discard(key)
        self._raise_watermark(peer, date)

    def _raise_watermark(self, peer: str, date: float) -> None:
        self.watermarks[peer] = max(date, self.watermarks.pop(peer, date))
        while len(self.watermarks) > self._max_peers:
            self.watermarks.popitem(last=False)

    def _move_back(self, key: Key) -> None:
        self._dates.move_to_end(key)
        self._rounds[key[0]].rotate(-1)

