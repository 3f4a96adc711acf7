"""Slots shared fairly across peers: at most ``total`` held at once, at most ``per_peer`` by one peer.

The payload server and the fetcher each keep one. The server asks ``try_acquire`` and turns a request
away when there is no slot (a fetcher sees the stream closed and tries again later), so a hundred
streams opened by one identity hold two slots, not a hundred payloads. The fetcher waits in ``hold``:
a freed slot goes to the waiting peer that holds the fewest slots (the longest waiting among equals),
so peers whose fetches are slow, however many identities they have, cannot keep another peer's fetch
waiting behind all of theirs.

Single-threaded: every call on the asyncio loop that owns it.
"""

import asyncio
import contextlib
import itertools
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field


@dataclass(order=True)
class _Waiter:
    held: int  # slots its peer held when it began to wait (refreshed on every grant)
    order: int
    peer: str = field(compare=False)
    granted: asyncio.Future = field(compare=False)


class FairSlots:
    def __init__(self, total: int, per_peer: int):
        if total < 1 or per_peer < 1:
            raise ValueError(f"need total ≥ 1 and per_peer ≥ 1, got {total}, {per_peer}")
        self.total, self.per_peer = total, per_peer
        self._held: Counter[str] = Counter()
        self._waiting: list[_Waiter] = []
        self._order = itertools.count()

    @property
    def in_use(self) -> int:
        return sum(self._held.values())

    def held_by(self, peer: str) -> int:
        return self._held[peer]

    def try_acquire(self, peer: str) -> bool:
        """Take a slot for ``peer`` now if one is free to it (and no other peer is waiting for it)."""
        if self._waiting or not self._free_to(peer):
            return False
        self._held[peer] += 1
        return True

    def release(self, peer: str) -> None:
        if self._held[peer] <= 0:
            raise ValueError(f"{peer} holds no slot")
        self._held[peer] -= 1
        if not self._held[peer]:
            del self._held[peer]
        self._grant()

    @contextlib.asynccontextmanager
    async def hold(self, peer: str) -> AsyncIterator[None]:
        """Wait for a slot (fairly: see the module's doc), hold it inside the block."""
        if not self.try_acquire(peer):
            waiter = _Waiter(self._held[peer], next(self._order), peer, asyncio.get_running_loop().create_future())
            self._waiting.append(waiter)
            self._grant()  # a slot may be free to it while the peers waiting before it are at their share
            try:
                await waiter.granted
            except asyncio.CancelledError:
                if waiter in self._waiting:
                    self._waiting.remove(waiter)
                elif waiter.granted.done() and not waiter.granted.cancelled():
                    self.release(peer)  # granted as it was cancelled: pass the slot on
                raise
        try:
            yield
        finally:
            self.release(peer)

    def _free_to(self, peer: str) -> bool:
        return self.in_use < self.total and self._held[peer] < self.per_peer

    def _grant(self) -> None:
        while self.in_use < self.total:
            eligible = [w for w in self._waiting if self._held[w.peer] < self.per_peer]
            if not eligible:
                return
            for waiter in eligible:
                waiter.held = self._held[waiter.peer]
            chosen = min(eligible)
            self._waiting.remove(chosen)
            self._held[chosen.peer] += 1
            chosen.granted.set_result(None)
