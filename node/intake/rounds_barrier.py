"""Rounds mode's wait for the peers (``loop.mode = "rounds"``, docs/node.md): a round waits, up to
``loop.round_deadline_s``, until every live peer (announced within its TTL, with a tokenizer this node trains on:
its own, or any with ``[swarm] other_tokenizers = "sequence"``; not muted, not announcing itself unreachable) has
delivered a batch of this round or a later one, and trains on the batches of this round and earlier ones.

What the node knows of its peers' rounds comes from its transport (``Transport.peer_rounds``): the newest round each
delivered a batch of, and the newest its signed announcement lists. The transport hands over only batches of this
node's round or earlier (``Transport.set_round``): a batch of a later round stays in its inbox, charged to its peer's
quota and to the buffer, until this node reaches that round (where its prompts are this node's too) or it is
``max_age_s`` old; one more than ``loop.rounds_ahead`` rounds ahead is not fetched at all. A peer that announces a
round beyond that window is not waited for: this node is behind it, or it lies, and either way no batch of this round
will come from it.

A live peer that misses a round's deadline is charged for it: ``inbox.MISSED_ROUND``, at full weight
(``reputation.MISSED_WEIGHT``), or ``inbox.LATE_ROUND``, as a failed fetch, where it had been on time for
``ON_TIME_ROUNDS`` rounds in a row before (a slow link, once). So a peer that withholds its batches, one round in
three say, is muted within a few rounds and no longer waited for, while an honest peer late once is not. One that
missed ``MISSED_ROUNDS_IGNORED`` rounds in a row is not waited for until it delivers a newer round: a member that
announces itself and never publishes (a ghost) costs a few deadlines, not every round.

A node that joins (or restarts) takes the swarm's round before its first round (``join``): it looks for
``loop.min_peers`` live peers for a few seconds (``JOIN_LOOK_S``: a swarm starting together has none to show yet) and
starts at the round a majority of them reached, whose batches are out already, so that its very first step can train
on them. A node that finds its peers ahead after a round
jumps to their round (``swarm_round``), so the swarm falls into step: to a round
a strict majority of its live peers have reached, and, beyond the window, at least ``FAR_JUMP_QUORUM`` of them,
unless this node is joining (its first round that sees a peer: a joining or restarting node takes the swarm's round
even from one peer). Short of that quorum it moves to the window's end: a node that fell behind its only peer (a
long evaluation, say) catches up ``loop.rounds_ahead`` rounds at a time, and one peer's claim of a far-off round
moves a running node no faster.
"""

import time
from collections import OrderedDict
from dataclasses import dataclass

from ftis.node.config import NodeConfig
from ftis.node.swarm.exchange.reasons import LATE_ROUND, MISSED_ROUND
from ftis.node.swarm.peers.peer_rounds import PeerRounds
from ftis.node.swarm.transport import ReceivedBatch, Transport
from ftis.protocol.limits import MAX_ROUND

# A live peer that missed this many deadlines in a row is not waited for until it delivers a newer round.
MISSED_ROUNDS_IGNORED = 2
# A peer on time for this many rounds in a row has its next miss charged as a failed fetch (LATE_ROUND).
ON_TIME_ROUNDS = 5
# A running node jumps further than loop.rounds_ahead only to a round at least this many live peers have reached.
FAR_JUMP_QUORUM = 2
# ...and no node jumps past this round, whoever claims it: half the protocol's range (MAX_ROUND / 2 rounds, 17,000
# years at a round a second), so a node can always publish the rounds after it.
MAX_JUMP_ROUND = MAX_ROUND // 2
# Peers whose misses and rounds on time are remembered: the newest this many.
MAX_PEERS_NOTED = 4096
_POLL_S = 0.05  # how often the local inbox is checked while waiting (no network call)
_REPOLL_S = 0.1  # ...and how often the transport is asked to read the announcements meanwhile
# How long a joining node looks for live peers before its first round: peers already training have announced
# themselves and show at the first reads; peers starting with it announce only with their first batch, so in a swarm
# that starts together every node would otherwise wait out the whole deadline for the others, and all of them in vain.
JOIN_LOOK_S = 10.0


@dataclass(frozen=True)
class Waited:
    received: list[ReceivedBatch]  # every batch taken, in arrival order
    seconds: float
    late_peers: int  # live peers still missing at the deadline


@dataclass(frozen=True)
class Misses:
    count: int  # deadlines missed in a row
    delivered: int  # the newest round it had delivered at the last of them


class RoundsBarrier:
    """What this node knows of its peers' rounds, and their record: deadlines missed, rounds on time."""

    def __init__(self, config: NodeConfig, transport: Transport, fingerprint: str):
        self.config, self.transport, self.fingerprint = config, transport, fingerprint
        self._ahead = config.loop.rounds_ahead
        self._round = 0  # the round waited for last
        self._joining = True  # until a round that sees a live peer ends
        self._missed: OrderedDict[str, Misses] = OrderedDict()
        self._on_time: OrderedDict[str, int] = OrderedDict()  # rounds on time in a row
        if config.loop.mode == "rounds":  # from the start: later rounds' batches stay in the inbox
            transport.set_round(0, self._ahead)

    def enter(self, round_: int) -> None:
        """This node is at round ``round_``: the transport hands over its batches and earlier ones from now on."""
        self._round = round_
        self.transport.set_round(round_, self._ahead)

    def join(self, round_: int) -> int:
        """A joining (or restarting) node's round before its first: it waits, up to ``JOIN_LOOK_S`` (or the round's
        deadline, if shorter), until ``loop.min_peers`` live peers are known (no wait with 0), then takes the round a
        strict majority of them reached
        (at most ``MAX_JUMP_ROUND``), so that its first round is the swarm's, whose batches are out already, instead of
        a round no peer will publish again. ``round_`` itself once it has joined, or while no live peer is known."""
        if not self._joining:
            return round_
        deadline = time.monotonic() + min(self.config.loop.round_deadline_s, JOIN_LOOK_S)
        self.transport.poll_now()
        while len(self._live_peers()) < self.config.loop.min_peers and time.monotonic() < deadline:
            time.sleep(_REPOLL_S)
            self.transport.poll_now()
        rounds = self.transport.peer_rounds()
        reached = sorted((rounds.newest(peer) for peer in self._live_peers()), reverse=True)
        if not reached:
            return round_
        target = max(round_, min(reached[len(reached) // 2], MAX_JUMP_ROUND))  # reached by a strict majority
        self.enter(target)
        return target

    def wait(self, received: list[ReceivedBatch], round_: int) -> Waited:
        """Take arrivals until every awaited peer delivered round ``round_`` or the deadline passed."""
        started = time.monotonic()
        deadline = started + self.config.loop.round_deadline_s
        asked = -float("inf")
        while (missing := self._missing_peers(round_)) and time.monotonic() < deadline:
            if time.monotonic() - asked >= _REPOLL_S:  # don't wait out the transport's poll period
                self.transport.poll_now()
                asked = time.monotonic()
            time.sleep(_POLL_S)
            received = [*received, *self.transport.receive()]
        if not self.config.swarm.fetch_budget:  # under a budget no peer was asked for this round: none is judged
            self._judge(round_, self.transport.peer_rounds())
        return Waited(received, time.monotonic() - started, len(missing))

    def swarm_round(self) -> int:
        """The newest round enough live peers have reached (delivered or announced a batch of it or a later one): a
        strict majority of them, and at least ``FAR_JUMP_QUORUM`` for a round beyond the window unless this node is
        joining (else the window's end); at most ``MAX_JUMP_ROUND``; -1 when none. The transport moves on to this
        node's next round: the larger of that and the round after the last one waited for (as ``runner/node.py``
        takes it)."""
        live = self._live_peers()
        rounds = self.transport.peer_rounds()
        reached = sorted((rounds.newest(peer) for peer in live), reverse=True)

        def reached_by(quorum: int) -> int:
            return reached[quorum - 1] if len(reached) >= quorum else -1

        majority = len(live) // 2 + 1
        jump = reached_by(majority)
        if jump > self._round + self._ahead and not self._joining:
            jump = max(reached_by(max(majority, FAR_JUMP_QUORUM)), self._round + self._ahead)
        jump = min(jump, MAX_JUMP_ROUND)
        self._joining = self._joining and not live
        if self.config.loop.mode == "rounds":
            self.enter(max(self._round + 1, jump))
        return jump

    def _judge(self, round_: int, rounds: PeerRounds) -> None:
        """The record of each peer this round waited for: on time, or charged for the deadline it missed."""
        for peer in self._awaited(round_, rounds):
            delivered = rounds.delivered.get(peer, -1)
            streak = self._on_time.pop(peer, 0)
            if delivered >= round_:
                self._missed.pop(peer, None)
                self._on_time[peer] = streak + 1
                continue
            misses = self._missed.pop(peer, Misses(0, delivered))
            self._missed[peer] = Misses(misses.count + 1, delivered)
            self.transport.report_fault(peer, LATE_ROUND if streak >= ON_TIME_ROUNDS else MISSED_ROUND)
        for table in (self._missed, self._on_time):  # bounded memory: the peers judged last
            while len(table) > MAX_PEERS_NOTED:
                table.popitem(last=False)

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

    def _awaited(self, round_: int, rounds: PeerRounds) -> set[str]:
        """Live peers this round waits for: not those that announce a round beyond the window, nor those that
        missed the last ``MISSED_ROUNDS_IGNORED`` deadlines and delivered no newer round since."""
        def ignored(peer: str) -> bool:
            misses = self._missed.get(peer)
            return (misses is not None and misses.count >= MISSED_ROUNDS_IGNORED
                    and rounds.delivered.get(peer, -1) <= misses.delivered)

        return {peer for peer in self._live_peers()
                if rounds.announced.get(peer, -1) <= round_ + self._ahead and not ignored(peer)}

    def _missing_peers(self, round_: int) -> set[str]:
        """Awaited peers that have not yet delivered a batch of this round or a later one (a batch that arrived
        early, during an earlier round's wait, counts), plus a placeholder for each live peer short of
        ``loop.min_peers`` (a live peer not awaited, one beyond the window, still counts: it is there, and waiting
        for it would only wait out the deadline)."""
        rounds = self.transport.peer_rounds()
        awaited = self._awaited(round_, rounds)
        wanted = self.config.loop.min_peers
        live = len(self._live_peers()) if wanted else 0
        placeholders = {f"(peer {k} of {wanted})" for k in range(live + 1, wanted + 1)}
        budget = self.config.swarm.fetch_budget
        if budget:  # the batches it chose: placeholders only, so no peer is charged for a round it was not asked
            reached = sum(1 for latest in rounds.delivered.values() if latest >= round_)
            goal = min(budget, len(awaited))
            return placeholders | {f"(batch {k} of {goal})" for k in range(reached + 1, goal + 1)}
        return placeholders | {peer for peer in awaited if rounds.delivered.get(peer, -1) < round_}
