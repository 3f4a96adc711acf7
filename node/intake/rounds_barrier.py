"""Rounds mode's wait for the peers (``loop.mode = "rounds"``, docs/node.md): a round waits, up to
``loop.round_deadline_s``, until every live peer (announced within its TTL, with a tokenizer this node trains on:
its own, or any with ``[swarm] other_tokenizers = "sequence"``; not muted, not announcing itself unreachable) has
delivered a batch of this round or a later one, and trains on the batches of this round and earlier ones (a
batch of a later round is held until this node reaches that round, where its prompts are this node's too).

A live peer that misses a round's deadline is charged for it (``inbox.MISSED_ROUND``), and one that missed
``MISSED_ROUNDS_IGNORED`` rounds in a row is no longer waited for until it delivers again: a member that
announces itself and never publishes (a ghost) costs a few deadlines, not every round. A node that finds its
peers ahead (it joined late, or restarted) jumps to their round (``swarm_round``), so the swarm falls into
step; only to a round a strict majority of its live peers have reached, so one peer's claim of a far-off
round moves no node that has other peers.
"""

import time
from dataclasses import dataclass

from ftis.node.config import NodeConfig
from ftis.node.swarm.inbox import MISSED_ROUND
from ftis.node.swarm.transport import ReceivedBatch, Transport
from ftis.protocol.limits import MAX_ROUND

# A live peer that missed this many deadlines in a row is not waited for until it delivers again.
MISSED_ROUNDS_IGNORED = 2
# ...and no node jumps past this round, whoever claims it: half the protocol's range (MAX_ROUND / 2 rounds, 17,000
# years at a round a second), so a node can always publish the rounds after it.
MAX_JUMP_ROUND = MAX_ROUND // 2
# Peers whose newest round is remembered: past this, the half with the oldest rounds is forgotten.
MAX_PEERS_NOTED = 4096
_POLL_S = 0.05  # how often the local inbox is checked while waiting (no network call)
_REPOLL_S = 0.1  # ...and how often the transport is asked to read the announcements meanwhile


class LaterRounds:
    """Peers' batches of rounds this node has not reached yet, held until it does."""

    def __init__(self) -> None:
        self._held: list[ReceivedBatch] = []

    def take(self, received: list[ReceivedBatch], round_: int) -> list[ReceivedBatch]:
        """The batches of round ``round_`` or earlier among those held and ``received``; later ones are held."""
        pending = [*self._held, *received]
        self._held = [item for item in pending if item.batch.round > round_]
        return [item for item in pending if item.batch.round <= round_]

    def __len__(self) -> int:
        return len(self._held)


@dataclass(frozen=True)
class Waited:
    received: list[ReceivedBatch]  # every batch taken, in arrival order (later rounds' included)
    seconds: float
    late_peers: int  # live peers still missing at the deadline


class RoundsBarrier:
    """What this node knows of its peers' rounds: the newest each delivered, the deadlines each missed."""

    def __init__(self, config: NodeConfig, transport: Transport, fingerprint: str):
        self.config, self.transport, self.fingerprint = config, transport, fingerprint
        self._latest: dict[str, int] = {}  # each peer's newest round delivered so far
        self._missed: dict[str, int] = {}  # deadlines each live peer has missed in a row
        self.later = LaterRounds()

    def wait(self, received: list[ReceivedBatch], round_: int) -> Waited:
        """Take arrivals until every awaited peer delivered round ``round_`` or the deadline passed."""
        started = time.monotonic()
        deadline = started + self.config.loop.round_deadline_s
        self._note(received)
        asked = -float("inf")
        while (missing := self._missing_peers(round_)) and time.monotonic() < deadline:
            if time.monotonic() - asked >= _REPOLL_S:  # don't wait out the transport's poll period
                self.transport.poll_now()
                asked = time.monotonic()
            time.sleep(_POLL_S)
            arrived = self.transport.receive()
            self._note(arrived)
            received = [*received, *arrived]
        for peer in missing & self._live_peers():  # not the placeholders of peers short of min_peers
            self._missed[peer] = self._missed.get(peer, 0) + 1
            self.transport.report_fault(peer, MISSED_ROUND)
        return Waited(received, time.monotonic() - started, len(missing))

    def swarm_round(self) -> int:
        """The newest round a strict majority of the live peers have delivered a batch of (or of a later
        round), at most ``MAX_JUMP_ROUND``; -1 when fewer than that majority have delivered any."""
        live = self._live_peers()
        reached = sorted((self._latest[peer] for peer in live if peer in self._latest), reverse=True)
        quorum = len(live) // 2 + 1
        return min(reached[quorum - 1], MAX_JUMP_ROUND) if len(reached) >= quorum else -1

    def _note(self, received: list[ReceivedBatch]) -> None:
        for item in received:
            self._latest[item.peer_id] = max(item.batch.round, self._latest.get(item.peer_id, -1))
            self._missed.pop(item.peer_id, None)
        if len(self._latest) > MAX_PEERS_NOTED:  # bounded memory: keep the peers with the newest rounds
            kept = sorted(self._latest.items(), key=lambda entry: -entry[1])[:MAX_PEERS_NOTED // 2]
            self._latest = dict(kept)
            self._missed = {peer: count for peer, count in self._missed.items() if peer in self._latest}

    def _live_peers(self) -> set[str]:
        """Peers announced within the TTL, with this node's tokenizer (or any, where it takes other tokenizers' texts),
        not muted (a muted peer's batches are
        refused anyway, and a peer that got itself muted must not hold every round up to the deadline), and not
        unreachable by their own account (no one fetches their batches)."""
        live_since = time.time() - self.config.swarm.announcement_ttl_s
        any_tokenizer = self.config.swarm.other_tokenizers == "sequence"
        muted = {peer for peer, score in self.transport.scores().items() if score.muted_until is not None}
        return {member.peer_id for member in self.transport.members()
                if member.peer_id != self.transport.peer_id and (any_tokenizer or member.tokenizer == self.fingerprint)
                and member.last_seen >= live_since and member.peer_id not in muted and member.reach != "unreachable"}

    def _missing_peers(self, round_: int) -> set[str]:
        """Live peers that have not yet delivered a batch of this round or a later one (a batch that
        arrived early, during an earlier round's wait, counts), unless they missed the last
        ``MISSED_ROUNDS_IGNORED`` deadlines, plus a placeholder for each peer short of ``loop.min_peers``."""
        awaited = {peer for peer in self._live_peers() if self._missed.get(peer, 0) < MISSED_ROUNDS_IGNORED}
        wanted = self.config.loop.min_peers
        placeholders = {f"(peer {k} of {wanted})" for k in range(len(awaited) + 1, wanted + 1)}
        budget = self.config.swarm.fetch_budget
        if budget:  # the batches it chose: placeholders only, so no peer is charged for a round it was not asked
            reached = sum(1 for latest in self._latest.values() if latest >= round_)
            goal = min(budget, len(awaited))
            return placeholders | {f"(batch {k} of {goal})" for k in range(reached + 1, goal + 1)}
        missing = {peer for peer in awaited if self._latest.get(peer, -1) < round_}
        return missing | placeholders
