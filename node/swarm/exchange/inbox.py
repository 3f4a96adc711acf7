"""The receive policy every transport applies, and the bounded buffer of delivered batches.

For each batch a peer announces, ``consider`` decides before any byte is fetched: already seen (``seen.py``: a
bounded set, pruned in order), from another run, older than the max age, another tokenizer (unless the node takes
those: their groups are trained on per sequence), too many rounds ahead (rounds mode), over the peer's quota or the
buffer's bound. After a fetch, ``open`` checks the
payload's size and hash, reads it up to its compressed columns, charges the buffer what inflating them takes
(known before a byte is inflated: a small frame cannot claim gigabytes) and inflates them; ``deliver`` checks that
the decoded batch is the one announced (same peer, run, round, tokenizer) and queues it; ``drain`` hands queued
batches to the trainer. The buffer's bound (``max_bytes``) counts a batch in flight at its announced size and a
fetched one at what its decoded ids, log-probs and texts take, so it bounds the memory peers' batches hold.
Every refusal is counted by peer and reason (``TransportStats.rejections``). Each (peer, sequence
number) is considered once, so a batch is delivered at most once and a refused one is not asked for
again (a transport may retry a fetch that failed in transit before it reports the failure).

Rounds mode (``set_round``): ``drain`` hands over the batches of the node's round and earlier ones; a batch of a
later round stays queued, charged to its peer's quota and to the buffer, until the node reaches its round or it is
``max_age_s`` old (then dropped, its charge freed); one more than ``ahead`` rounds later is not fetched (``AHEAD``:
asked about again as the node comes closer). ``peer_rounds`` says each peer's newest round delivered and
announced (``peer_rounds.py``), which the rounds barrier reads.

The outcomes are also evidence about each peer (``reputation.py``): deliveries count for it, refusals
for what it sent (``PEER_FAULTS``) and failed fetches against it, and ``report_filtered`` adds the
divergence filter's verdict on its completions. A peer whose score falls too low is muted: ``consider``
refuses its batches (``MUTED``) until the mute ends.

Thread-safe: the network thread calls ``consider``/``deliver``/``fail``, the training loop ``drain``.
"""

import hashlib
import math
import random
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable

from ftis.node.config import SwarmConfig
from ftis.node.swarm.exchange.budget import Offer, pick, rank_offers
from ftis.node.swarm.exchange.charges import Charges, Tally
from ftis.node.swarm.exchange.limits import InboxLimits
from ftis.node.swarm.exchange.payload import Rejected, check_payload
from ftis.node.swarm.exchange.reasons import (
    AHEAD,
    BAD_ANNOUNCEMENT,
    BUFFER_FULL,
    DECODE_ERROR,
    FETCH_FAILED,
    LATE_ROUND,
    MISSED_ROUND,
    MUTED,
    NOT_AS_ANNOUNCED,
    OTHER_RUN,
    PEER_FAULTS,
    PEER_QUOTA,
    SLOW,
    STALE,
    TOKENIZER,
    TOO_LARGE,
    WAITING,
)
from ftis.node.swarm.exchange.seen import SeenSet
from ftis.node.swarm.peers.peer_rounds import PeerRounds, RoundBook
from ftis.node.swarm.peers.reputation import PeerScore, Reputation, ReputationSettings, reputation_settings
from ftis.node.swarm.transport import ReceivedBatch, TransportStats
from ftis.protocol import DecodeError, RolloutBatch, read
from ftis.protocol.announcement import Announcement, BatchDescriptor
from ftis.protocol.limits import MAX_ANNOUNCED_BATCHES, MAX_CLOCK_AHEAD_S

# Per-peer tables are capped (a swarm of thousands, Sybils that come and go): the bad-announcement digests, the
# forgotten dates, the peers' rounds and the rejection counts keep the newest this many peers.
MAX_PEERS_TRACKED = 4096
# The seen set's entries in all: a full listing of each peer tracked (65,536 entries, ~17 MB). Per peer, it keeps
# what a peer can list within max_age_s (``InboxLimits.seen_per_peer``).
MAX_SEEN = MAX_ANNOUNCED_BATCHES * MAX_PEERS_TRACKED



class Inbox:
    def __init__(self, run_id: str, tokenizer: str, limits: InboxLimits, clock: Callable[[], float] = time.time,
                 reputation: ReputationSettings | None = None):
        """``reputation``: how peers are scored and muted; None takes ``SwarmConfig``'s defaults."""
        self._run_id, self._tokenizer, self._limits, self._clock = run_id, tokenizer, limits, clock
        self._reputation = Reputation(reputation if reputation is not None else reputation_settings(SwarmConfig()))
        self._lock = threading.Lock()
        self._seen = SeenSet(limits.max_age_s, limits.seen_per_peer, MAX_SEEN, MAX_PEERS_TRACKED)
        self._held = Charges()  # (peer, round) -> bytes, in flight or queued; their sum and count by peer
        self._in_flight: dict[tuple[str, int], str] = {}  # -> the tokenizer the batch was announced with
        self._round: int | None = None  # rounds mode: the node's round (``set_round``); None: hand over every batch
        self._ahead = 0  # ...and how many rounds ahead of it a batch is fetched
        self._rounds = RoundBook(MAX_PEERS_TRACKED)
        # peer -> digest of its last bad record, counted once (the newest MAX_PEERS_TRACKED peers)
        self._bad_announcements: OrderedDict[str, bytes] = OrderedDict()
        self._next_prune = -float("inf")
        self._queue: deque[ReceivedBatch] = deque()
        self._tally = Tally(MAX_PEERS_TRACKED)

    def consider(self, announcement: Announcement, descriptor: BatchDescriptor) -> bool:
        """Whether to fetch this announced batch now. Each (peer, round) gets one final answer; a batch
        refused only for now (``WAITING``: no room, or too far ahead) is asked about again on later polls, and
        counted once."""
        key = (announcement.peer_id, descriptor.round)
        with self._lock:
            now = self._clock()
            if now >= self._next_prune:  # at most once a second; what it drops is all it costs (seen.py)
                self._seen.prune(now, self._held)
                self._age_out_held(now)
                self._reputation.forget_faded(now)
                self._next_prune = now + 1.0
            if key in self._held or self._seen.answered(key, descriptor.created_at):
                return False
            if key not in self._seen:
                # a date too far ahead (refused as stale) is remembered as now: forgotten max_age later, like any other
                date = descriptor.created_at if descriptor.created_at <= now + MAX_CLOCK_AHEAD_S else now
                self._seen.add(key, date, now, self._held)
            reason = self._refusal(announcement, descriptor, now)
            if reason in WAITING:
                if self._seen.defer(key):
                    self._count(announcement.peer_id, reason)
                return False
            self._seen.settle(key)
            if reason is not None:
                self._count(announcement.peer_id, reason)
                return False
            self._held.hold(key, descriptor.bytes)
            self._in_flight[key] = announcement.tokenizer
            return True

    def _refusal(self, announcement: Announcement, descriptor: BatchDescriptor, now: float) -> str | None:
        if announcement.run_id != self._run_id:
            return OTHER_RUN
        if not self._fresh(descriptor, now):
            return STALE
        if announcement.tokenizer != self._tokenizer and not self._limits.other_tokenizers:
            return TOKENIZER
        if self._reputation.muted(announcement.peer_id, now):
            return MUTED
        if self._round is not None and descriptor.round > self._round + self._ahead:
            return AHEAD
        if self._held.of_peer(announcement.peer_id) >= self._limits.per_peer_quota:
            return PEER_QUOTA
        if (len(self._held) >= self._limits.max_batches
                or self._held.bytes + descriptor.bytes > self._limits.max_bytes):
            return BUFFER_FULL
        return None

    def deliver(self, peer_id: str, descriptor: BatchDescriptor, batch: RolloutBatch, payload_bytes: int,
                lateness: float = 0.0) -> bool:
        """Queue a fetched, decoded batch if it is the one that was announced. ``lateness``, in [0, 1]: how far
        into the second half of its fetch deadline it arrived (0 within the first half, 1 at the deadline); a
        late delivery is partial evidence, that share of it counting as a failed fetch (and as ``SLOW``)."""
        key = (peer_id, descriptor.round)
        with self._lock:
            if key not in self._in_flight:
                return False  # not considered, or already settled
            announced_tokenizer = self._in_flight.pop(key)
            matches = (batch.peer_id == peer_id and batch.round == descriptor.round and batch.run_id == self._run_id
                       and batch.tokenizer.fingerprint == announced_tokenizer
                       and batch.created_at == descriptor.created_at
                       and len(batch.groups) == descriptor.groups and batch.num_completion_tokens == descriptor.tokens
                       and batch.policy.policy_version == descriptor.policy_version)
            if not matches:
                self._held.release(key)
                self._count(peer_id, NOT_AS_ANNOUNCED)
                return False
            self._queue.append(ReceivedBatch(peer_id, batch, payload_bytes, self._clock()))
            self._rounds.delivered(peer_id, batch.round)
            lateness = min(max(lateness, 0.0), 1.0)
            self._reputation.delivered(peer_id, self._clock(), share=1.0 - lateness)
            if lateness > 0:
                self._reputation.failed(peer_id, self._clock(), share=lateness)
                self._tally.refused(peer_id, SLOW)
            self._tally.delivered(payload_bytes)
            return True

    def open(self, peer_id: str, descriptor: BatchDescriptor, data: bytes) -> RolloutBatch:
        """The batch in a fetched payload, if it is exactly the announced one (size, hash, strict decode) and this
        node can hold it: read up to its compressed columns, then charged what inflating them takes (its texts
        only where its tokenizer is another: this node reads the ids of its own) in place of the announced size,
        and only then inflated. ``Rejected``: ``TOO_LARGE`` for a batch no room could hold, or whose texts are
        longer than this node could train on; ``BUFFER_FULL`` for one the peers' batches leave no room for now.
        Runs in the caller's thread (a transport's decoding thread), never holding the lock while inflating."""
        check_payload(descriptor, data)
        try:
            compressed = read(data)
        except DecodeError as error:
            raise Rejected(DECODE_ERROR, str(error)) from None
        texts = compressed.header.tokenizer.fingerprint != self._tokenizer
        limit = self._limits.max_text_bytes
        if texts and limit is not None and compressed.longest_text > limit:
            raise Rejected(TOO_LARGE, f"a completion's text of {compressed.longest_text} bytes; this node trains on "
                                      f"none longer than {limit}")
        self._charge(peer_id, descriptor, len(data) + compressed.cost(texts))
        try:
            return compressed.inflate(texts)
        except DecodeError as error:
            raise Rejected(DECODE_ERROR, str(error)) from None

    def _charge(self, peer_id: str, descriptor: BatchDescriptor, cost: int) -> None:
        """Charge a batch in flight ``cost`` bytes in place of its announced size, if it fits."""
        key = (peer_id, descriptor.round)
        with self._lock:
            if cost > self._limits.max_bytes:
                raise Rejected(TOO_LARGE, f"decoding it takes up to {cost} bytes, more than the "
                                          f"{self._limits.max_bytes} this node holds of all its peers' batches "
                                          "(swarm.max_buffered_bytes)")
            others = self._held.bytes - self._held.get(key, 0)
            if others + cost > self._limits.max_bytes:
                raise Rejected(BUFFER_FULL, f"decoding it takes up to {cost} bytes; the batches held leave "
                                            f"{max(self._limits.max_bytes - others, 0)}")
            self._held.recharge(key, cost)

    def fresh(self, descriptor: BatchDescriptor) -> bool:
        """Whether the batch is still within the max age (a transport asks before retrying a fetch)."""
        return self._fresh(descriptor, self._clock())

    def _fresh(self, descriptor: BatchDescriptor, now: float) -> bool:
        return now - self._limits.max_age_s <= descriptor.created_at <= now + MAX_CLOCK_AHEAD_S

    def fail(self, peer_id: str, descriptor: BatchDescriptor, reason: str) -> None:
        """A considered batch that could not be fetched or checked: counted, not asked for again."""
        key = (peer_id, descriptor.round)
        with self._lock:
            if key in self._in_flight:
                del self._in_flight[key]
                self._held.release(key)
                self._count(peer_id, reason)

    def choose(self, announcements: Iterable[Announcement], budget: int, tie_s: float, rng: random.Random,
               horizon_s: float = math.inf) -> list[tuple[Announcement, BatchDescriptor]]:
        """The announced batches to fetch now, each already ``consider``-ed. ``budget`` 0: every one ``consider``
        takes. Otherwise a fetch budget (``sampling.py``): the freshest (ages in slices of ``tie_s``, better-scored
        peers first, then at random; none older than ``horizon_s``), from distinct peers, as many as the batches
        in flight or waiting for the trainer leave room for, up to ``budget``. Each announcement's newest fresh
        round is noted first (``peer_rounds``)."""
        announcements = list(announcements)
        with self._lock:
            now = self._clock()
            for a in announcements:
                rounds = [d.round for d in a.batches if self._fresh(d, now)]
                if a.run_id == self._run_id and rounds:
                    self._rounds.announced(a.peer_id, max(rounds))
        if budget == 0:
            return [(a, d) for a in announcements for d in a.batches if self.consider(a, d)]
        with self._lock:
            busy = {peer for peer, _ in self._held}
            room = budget - len(self._held)
            scores = {peer: score.score for peer, score in self._reputation.snapshot(self._clock()).items()}
        if room <= 0:
            return []
        offers = [Offer(a.peer_id, d.created_at, (a, d)) for a in announcements if a.peer_id not in busy
                  for d in a.batches]
        ranked = rank_offers(offers, self._clock(), tie_s, rng, scores, horizon_s)
        return [offer.item for offer in pick(ranked, room, busy, lambda offer: self.consider(*offer.item))]

    def reject_announcement(self, peer_id: str, record: bytes = b"") -> None:
        """Count a peer's invalid announcement record, once per distinct record (polls see it again)."""
        digest = hashlib.sha256(record).digest()
        with self._lock:
            if self._bad_announcements.get(peer_id) != digest:
                self._bad_announcements[peer_id] = digest
                self._bad_announcements.move_to_end(peer_id)
                while len(self._bad_announcements) > MAX_PEERS_TRACKED:
                    self._bad_announcements.popitem(last=False)
                self._count(peer_id, BAD_ANNOUNCEMENT)

    def admit_announcement(self, announcement: Announcement, record: bytes) -> bool:
        """Whether a peer's decoded, correctly signed announcement may describe a member: not dated more
        than ``MAX_CLOCK_AHEAD_S`` ahead (a record dated in a century would stay "live" for as long).
        A refused one counts as a bad announcement, once per distinct record."""
        if announcement.updated_at <= self._clock() + MAX_CLOCK_AHEAD_S:
            return True
        self.reject_announcement(announcement.peer_id, record)
        return False

    def muted(self, peer_id: str) -> bool:
        """Whether the peer is muted now (a transport asks before retrying a fetch)."""
        with self._lock:
            return self._reputation.muted(peer_id, self._clock())

    def report_filtered(self, peer_id: str, batches: int, completions: int, filtered: int) -> None:
        """A step trained on ``completions`` of the peer's completions, drawn from ``batches`` of its batches,
        and the divergence filter dropped ``filtered`` of them: evidence about the peer (``Reputation.filtered``)."""
        with self._lock:
            self._reputation.filtered(peer_id, batches, completions, filtered, self._clock())

    def report_fault(self, peer_id: str, reason: str) -> None:
        """What the node found against the peer beyond the door: a delivered batch at fault once read
        (``PEER_FAULTS``: charged like a refusal), or a round it missed (``MISSED_ROUND``, ``LATE_ROUND``)."""
        if reason not in PEER_FAULTS | {MISSED_ROUND, LATE_ROUND}:
            raise ValueError(f"{reason!r} is not a fault of the peer's")
        with self._lock:
            self._count(peer_id, reason)

    def scores(self) -> dict[str, PeerScore]:
        """Every peer this inbox has evidence about, as it judges it now."""
        with self._lock:
            return self._reputation.snapshot(self._clock())

    def set_round(self, round_: int, ahead: int) -> None:
        """Rounds mode: the node is at round ``round_``; batches of later rounds stay queued (``drain``), and none
        more than ``ahead`` rounds later is fetched."""
        with self._lock:
            self._round, self._ahead = round_, ahead

    def peer_rounds(self) -> PeerRounds:
        with self._lock:
            return self._rounds.snapshot()

    def drain(self, max_batches: int | None = None) -> list[ReceivedBatch]:
        """The queued batches, oldest first (at most ``max_batches``); in rounds mode, those of the node's round or
        earlier only."""
        with self._lock:
            self._age_out_held(self._clock())
            batches: list[ReceivedBatch] = []
            kept: deque[ReceivedBatch] = deque()
            for received in self._queue:
                if (max_batches is None or len(batches) < max_batches) and not self._later(received):
                    batches.append(received)
                    self._held.release((received.peer_id, received.batch.round))  # the peer's quota and the buffer
                else:
                    kept.append(received)
            self._queue = kept
            return batches

    def stats(self) -> TransportStats:
        with self._lock:
            return self._tally.stats()

    def _later(self, received: ReceivedBatch) -> bool:
        """Whether the batch is of a later round than the node's (rounds mode): held in the queue."""
        return self._round is not None and received.batch.round > self._round

    def _age_out_held(self, now: float) -> None:
        """Drop the batches held for a later round that are now older than max_age_s, freeing their charge."""
        cutoff = now - self._limits.max_age_s
        stale = [r for r in self._queue if self._later(r) and r.batch.created_at < cutoff]
        for received in stale:
            self._queue.remove(received)
            self._held.release((received.peer_id, received.batch.round))
            self._tally.refused(received.peer_id, STALE)

    def _count(self, peer_id: str, reason: str) -> None:
        self._tally.refused(peer_id, reason)
        if reason in PEER_FAULTS:
            self._reputation.refused(peer_id, self._clock())
        elif reason == MISSED_ROUND:
            self._reputation.missed(peer_id, self._clock())
        elif reason in (FETCH_FAILED, LATE_ROUND):
            self._reputation.failed(peer_id, self._clock())
