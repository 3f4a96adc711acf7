"""Saying loudly that a node trains alone: no peer announced itself, or delivered a batch, for a while.

A node cut off from the DHT (a wrong ``--peer``, a bootstrap that went away, a firewall) keeps training
on its own groups, which looks like success in every figure but one. The run loop asks ``Alone.check``
after each round; it returns a warning when no peer has been seen for ``after_s`` seconds, and again
every ``repeat_s`` while that lasts, saying what the transport counted (failed announcements and reads).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass

from ftis.node.records.round_report import ALONE_AFTER_S
from ftis.node.swarm.transport import TransportStats

REPEAT_S = 300.0


@dataclass
class Alone:
    after_s: float = ALONE_AFTER_S
    repeat_s: float = REPEAT_S
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        self.last_peer = self.clock()  # a fresh node has just joined: it gets after_s to meet someone
        self._warned: float | None = None

    def seconds(self) -> float:
        """Seconds since a peer was last seen (0 while one is around)."""
        return max(0.0, self.clock() - self.last_peer)

    def check(self, peers: int, stats: TransportStats) -> str | None:
        """After a round: ``peers`` members seen now besides this node (or peers whose batches arrived)."""
        now = self.clock()
        if peers > 0:
            self.last_peer, self._warned = now, None
            return None
        if now - self.last_peer < self.after_s or (self._warned is not None and now - self._warned < self.repeat_s):
            return None
        self._warned = now
        return (f"WARNING: no peer seen for {now - self.last_peer:.0f} s: this node trains alone "
                f"({stats.announce_failures} announcements and {stats.poll_failures} reads of the DHT failed). "
                "Check --peer (a member's full address) and that it is reachable; `ftis-node status --peer ...` "
                "lists the members it can see.")
