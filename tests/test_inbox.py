"""The receive policy (``Inbox``, ``open_payload``) and the publishing side (``Outbox``) that every
transport shares, tested alone with a fake clock and no network.

Run: python -m pytest tests/test_inbox.py -q

An inbox answers each announced (peer, round) once: ``consider`` says whether to fetch it, ``deliver`` or
``fail`` settle a fetch, ``drain`` hands queued batches over. Every refusal is counted by peer and
reason; these tests read the counts from ``stats().rejections``.
"""

import hashlib
import importlib
from dataclasses import replace

import msgpack
import pytest
from helpers.swarm import RUN_ID, T0, TOKENIZER, FakeClock, make_batch, publish

from ftis.node.swarm.exchange import inbox as inbox_module
from ftis.node.swarm.exchange.charges import OTHER_PEERS
from ftis.node.swarm.exchange.inbox import MAX_CLOCK_AHEAD_S, Inbox
from ftis.node.swarm.exchange.limits import InboxLimits
from ftis.node.swarm.exchange.outbox import Outbox
from ftis.node.swarm.exchange.payload import Rejected, open_payload
from ftis.node.swarm.exchange.reasons import (
    BUFFER_FULL,
    DECODE_ERROR,
    FETCH_FAILED,
    HASH_MISMATCH,
    NOT_AS_ANNOUNCED,
    OTHER_RUN,
    PEER_QUOTA,
    SLOW,
    STALE,
    TOO_LARGE,
)
from ftis.node.swarm.exchange.reasons import TOKENIZER as TOKENIZER_REASON  # the reason, not the fingerprint
from ftis.protocol import Group, encode, read
from ftis.protocol.announcement import Announcement, BatchDescriptor, decode_announcement, encode_announcement
from ftis.protocol.limits import MAX_ANNOUNCED_BATCHES

read_module = importlib.import_module("ftis.protocol.decode")  # the package's ``decode`` is the function
MAX_AGE = 60.0
LIMITS = InboxLimits(max_age_s=MAX_AGE, per_peer_quota=2, max_batches=4, max_bytes=1 << 20)


@pytest.fixture
def clock():
    return FakeClock()


def make_inbox(clock, **limits) -> Inbox:
    return Inbox(RUN_ID, TOKENIZER, replace(LIMITS, **limits), clock)


def offer(inbox: Inbox, peer: str, round_: int, created_at: float = T0, **batch) -> bool:
    """Announce one batch of ``peer`` to ``inbox``; whether it would be fetched."""
    p = publish(make_batch(peer, round_, created_at, **batch))
    return inbox.consider(p.announcement, p.descriptor)


def fetch(inbox: Inbox, peer: str, round_: int, created_at: float = T0) -> bool:
    """Announce, and if considered, deliver what was announced (a fetch that went well)."""
    p = publish(make_batch(peer, round_, created_at))
    return inbox.consider(p.announcement, p.descriptor) and inbox.deliver(peer, p.descriptor, p.batch, len(p.data))


def rejections(inbox: Inbox) -> dict[tuple[str, str], int]:
    return inbox.stats().rejections


# --- consider ---------------------------------------------------------------------------------------


def test_a_fresh_batch_is_considered_once_and_only_once(clock):
    inbox = make_inbox(clock)
    p = publish(make_batch("alice", 0))
    assert inbox.consider(p.announcement, p.descriptor)
    assert not inbox.consider(p.announcement, p.descriptor)  # in flight
    assert inbox.deliver("alice", p.descriptor, p.batch, len(p.data))
    assert not inbox.consider(p.announcement, p.descriptor)  # queued
    assert len(inbox.drain()) == 1
    assert not inbox.consider(p.announcement, p.descriptor)  # delivered
    assert rejections(inbox) == {}


def test_another_run_is_refused_and_counted(clock):
    inbox = make_inbox(clock)
    assert not offer(inbox, "alice", 0, run_id="run-b")
    assert not offer(inbox, "alice", 0, run_id="run-b")  # answered once: not counted twice
    assert rejections(inbox) == {("alice", OTHER_RUN): 1}


def test_a_batch_older_than_max_age_is_stale(clock):
    inbox = make_inbox(clock)
    clock.advance(MAX_AGE)
    assert offer(inbox, "alice", 0, created_at=T0)  # exactly max_age old: still accepted
    assert not offer(inbox, "alice", 1, created_at=T0 - 0.001)
    assert rejections(inbox) == {("alice", STALE): 1}


def test_a_batch_dated_too_far_ahead_is_stale_and_forgotten_like_any_other(clock):
    inbox = make_inbox(clock, per_peer_quota=100, max_batches=100)
    assert offer(inbox, "alice", 0, created_at=T0 + MAX_CLOCK_AHEAD_S)  # a clock ahead: still accepted
    for round_ in range(1, 11):  # dated a year ahead: it would stay "fresh", and remembered, for a year
        assert not offer(inbox, "alice", round_, created_at=T0 + 3e7)
    assert rejections(inbox) == {("alice", STALE): 10}
    clock.advance(MAX_AGE + 1)
    assert offer(inbox, "bob", 0, created_at=clock())  # any consider forgets what is too old
    assert len(inbox._seen) == 2  # bob 0, and alice 0 in flight: memory stays bounded
    assert offer(inbox, "alice", 11, created_at=clock())  # alice's next batches are not taken for answered


def test_fresh_says_whether_a_batch_is_within_max_age_now(clock):
    inbox = make_inbox(clock)
    descriptor = publish(make_batch("alice", 0, created_at=T0)).descriptor
    assert inbox.fresh(descriptor)
    clock.advance(MAX_AGE)
    assert inbox.fresh(descriptor)  # exactly max_age old: still fresh, as in consider
    clock.advance(0.001)
    assert not inbox.fresh(descriptor)
    assert rejections(inbox) == {}  # a question, not a refusal


def test_another_tokenizer_is_skipped_and_counted_where_the_node_skips_them(clock):
    inbox = make_inbox(clock, other_tokenizers=False)
    assert not offer(inbox, "bob", 0, tokenizer="tok-b")
    assert rejections(inbox) == {("bob", TOKENIZER_REASON): 1}


def with_texts(batch):
    groups = tuple(Group.from_columns(g.group_id, g.task, g.prompt_ids,
                                      replace(g.columns, texts=tuple(f"text {c}" for c in range(g.size))))
                   for g in batch.groups)
    return replace(batch, groups=groups)


def test_texts_are_kept_only_for_another_tokenizer(clock):
    """A batch of this node's own tokenizer is read by its ids: its texts (several times the ids' memory) go."""
    inbox = make_inbox(clock)
    for peer, tokenizer in (("alice", TOKENIZER), ("bob", "tok-b")):
        p = publish(with_texts(make_batch(peer, 0, tokenizer=tokenizer)))
        assert inbox.consider(p.announcement, p.descriptor)
        assert inbox.deliver(peer, p.descriptor, inbox.open(peer, p.descriptor, p.data), len(p.data))
    delivered = {item.peer_id: item.batch for item in inbox.drain()}
    assert all(g.columns.texts is None for g in delivered["alice"].groups)
    assert all(g.columns.texts == tuple(f"text {c}" for c in range(g.size)) for g in delivered["bob"].groups)
    assert delivered["alice"].num_completion_tokens == make_batch("alice", 0).num_completion_tokens


def test_another_tokenizer_is_fetched_and_delivered_as_announced_by_default(clock):
    inbox = make_inbox(clock)
    p = publish(make_batch("bob", 0, tokenizer="tok-b"))
    assert inbox.consider(p.announcement, p.descriptor)
    assert inbox.deliver("bob", p.descriptor, p.batch, len(p.data))
    assert [item.batch.tokenizer.fingerprint for item in inbox.drain()] == ["tok-b"]
    # announced with tok-b, sent with this node's own: not the batch announced
    p = publish(make_batch("bob", 1, tokenizer="tok-b"))
    assert inbox.consider(p.announcement, p.descriptor)
    own = replace(p.batch, tokenizer=replace(p.batch.tokenizer, fingerprint=TOKENIZER))
    assert not inbox.deliver("bob", p.descriptor, own, len(p.data))
    assert rejections(inbox) == {("bob", NOT_AS_ANNOUNCED): 1}


def test_rejection_counts_keep_the_newest_peers_and_sum_the_others(clock, monkeypatch):
    monkeypatch.setattr(inbox_module, "MAX_PEERS_TRACKED", 3)
    inbox = make_inbox(clock)
    for k in range(5):  # five Sybils refused once each; then the first of those kept is refused again
        assert not offer(inbox, f"sybil-{k}", 0, run_id="run-b")
    assert not offer(inbox, "sybil-2", 1, run_id="run-b")
    assert not offer(inbox, "sybil-5", 0, run_id="run-b")  # sybil-3 is now the one refused longest ago
    assert rejections(inbox) == {(OTHER_PEERS, OTHER_RUN): 3, ("sybil-2", OTHER_RUN): 2, ("sybil-4", OTHER_RUN): 1,
                                 ("sybil-5", OTHER_RUN): 1}
    assert inbox.stats().rejected(OTHER_RUN) == 7  # by reason: every refusal


def test_peer_quota_counts_in_flight_and_queued_batches_and_frees_on_drain(clock):
    inbox = make_inbox(clock)  # quota 2
    assert fetch(inbox, "alice", 0)  # queued
    assert offer(inbox, "alice", 1)  # in flight
    assert not offer(inbox, "alice", 2)
    assert offer(inbox, "bob", 0)  # the quota is per peer
    assert rejections(inbox) == {("alice", PEER_QUOTA): 1}
    inbox.drain()  # alice 0 leaves the queue
    assert offer(inbox, "alice", 3)
    assert not offer(inbox, "alice", 2)  # a refused batch is not reconsidered


def test_buffer_full_by_count(clock):
    inbox = make_inbox(clock)  # 4 batches in all, 2 per peer
    for peer in ("alice", "bob"):
        assert offer(inbox, peer, 0) and fetch(inbox, peer, 1)
    assert not offer(inbox, "carol", 0)
    assert rejections(inbox) == {("carol", BUFFER_FULL): 1}
    inbox.drain(1)
    assert offer(inbox, "carol", 1)


def test_buffer_full_by_bytes(clock):
    size = len(encode(make_batch("alice", 0)))
    inbox = make_inbox(clock, max_bytes=size + len(encode(make_batch("bob", 0))) - 1)
    assert offer(inbox, "alice", 0)
    assert not offer(inbox, "bob", 0)  # both would be one byte over the bound
    assert rejections(inbox) == {("bob", BUFFER_FULL): 1}


def test_a_batch_larger_than_the_whole_buffer_is_refused(clock):
    inbox = make_inbox(clock, max_bytes=100)
    assert not offer(inbox, "alice", 0)
    assert rejections(inbox) == {("alice", BUFFER_FULL): 1}


# --- deliver and fail -------------------------------------------------------------------------------


def test_deliver_queues_only_considered_in_flight_batches(clock):
    inbox = make_inbox(clock)
    p = publish(make_batch("alice", 0))
    assert not inbox.deliver("alice", p.descriptor, p.batch, len(p.data))  # never considered
    assert inbox.consider(p.announcement, p.descriptor)
    assert inbox.deliver("alice", p.descriptor, p.batch, len(p.data))
    assert not inbox.deliver("alice", p.descriptor, p.batch, len(p.data))  # already settled
    [received] = inbox.drain()
    assert (received.peer_id, received.batch, received.payload_bytes, received.received_at) == (
        "alice", p.batch, len(p.data), T0)
    stats = inbox.stats()
    assert (stats.delivered_batches, stats.delivered_bytes) == (1, len(p.data))


def test_a_late_delivery_is_kept_but_counts_partly_as_a_failed_fetch(clock):
    inbox = make_inbox(clock)
    on_time, late = publish(make_batch("alice", 0)), publish(make_batch("slowpoke", 0))
    for p, lateness in ((on_time, 0.0), (late, 0.8)):
        assert inbox.consider(p.announcement, p.descriptor)
        assert inbox.deliver(p.batch.peer_id, p.descriptor, p.batch, len(p.data), lateness)
    assert len(inbox.drain()) == 2  # both kept
    scores = inbox.scores()
    assert scores["alice"].good == pytest.approx(1.0) and scores["alice"].bad == 0
    assert scores["slowpoke"].good == pytest.approx(0.2) and scores["slowpoke"].bad == pytest.approx(0.8 * 0.5)
    assert rejections(inbox) == {("slowpoke", SLOW): 1}


NOT_AS_ANNOUNCED_CASES = {
    # mallory announces alice's batch (same bytes, so the hash matches) as her own: a replay
    "replay_of_another_peer": lambda batch: make_batch("alice", batch.round),
    "other_round": lambda batch: replace(batch, round=batch.round + 1),
    "other_run": lambda batch: replace(batch, run_id="run-b"),
    "other_tokenizer": lambda batch: replace(batch, tokenizer=replace(batch.tokenizer, fingerprint="tok-b")),
    # the announcer's own descriptor lies: a fresh date for an old batch, other counts than the payload's
    "other_created_at": lambda batch: replace(batch, created_at=batch.created_at - 3600),
    "other_groups": lambda batch: replace(batch, groups=batch.groups[:1]),
    "other_policy_version": lambda batch: replace(batch, policy=replace(batch.policy, policy_version=9)),
}


@pytest.mark.parametrize("case", list(NOT_AS_ANNOUNCED_CASES))
def test_a_batch_other_than_the_announced_one_is_refused(clock, case):
    inbox = make_inbox(clock)
    p = publish(make_batch("mallory", 0))
    assert inbox.consider(p.announcement, p.descriptor)
    assert not inbox.deliver("mallory", p.descriptor, NOT_AS_ANNOUNCED_CASES[case](p.batch), len(p.data))
    assert inbox.drain() == []
    assert rejections(inbox) == {("mallory", NOT_AS_ANNOUNCED): 1}
    assert offer(inbox, "mallory", 1) and offer(inbox, "mallory", 2)  # the quota was freed


def test_fail_counts_frees_the_quota_and_never_retries(clock):
    inbox = make_inbox(clock)
    p = publish(make_batch("alice", 0))
    assert inbox.consider(p.announcement, p.descriptor)
    inbox.fail("alice", p.descriptor, FETCH_FAILED)
    inbox.fail("alice", p.descriptor, FETCH_FAILED)  # settled already: not counted again
    assert rejections(inbox) == {("alice", FETCH_FAILED): 1}
    assert not inbox.consider(p.announcement, p.descriptor)  # not retried
    assert not inbox.deliver("alice", p.descriptor, p.batch, len(p.data))
    assert offer(inbox, "alice", 1) and offer(inbox, "alice", 2)  # quota 2 is free again


def test_bad_announcements_are_counted_once_per_distinct_record(clock):
    inbox = make_inbox(clock)
    inbox.reject_announcement("mallory", b"garbage")
    inbox.reject_announcement("mallory", b"garbage")  # the same record, seen again at the next poll
    assert rejections(inbox) == {("mallory", "bad_announcement"): 1}
    inbox.reject_announcement("mallory", b"other garbage")
    assert inbox.stats().rejected("bad_announcement") == 2


# --- drain ------------------------------------------------------------------------------------------


def test_drain_hands_over_oldest_first_up_to_max(clock):
    inbox = make_inbox(clock)
    for peer, round_ in [("bob", 0), ("alice", 0), ("bob", 1), ("alice", 1)]:
        assert fetch(inbox, peer, round_)
        clock.advance(1)
    assert inbox.drain(0) == []
    first = inbox.drain(3)
    assert [(r.peer_id, r.batch.round) for r in first] == [("bob", 0), ("alice", 0), ("bob", 1)]
    assert [r.received_at for r in first] == [T0, T0 + 1, T0 + 2]
    assert [(r.peer_id, r.batch.round) for r in inbox.drain(10)] == [("alice", 1)]
    assert inbox.drain() == []


# --- bounded memory ---------------------------------------------------------------------------------


def test_seen_entries_are_forgotten_once_stale_and_stay_refused(clock):
    inbox = make_inbox(clock, per_peer_quota=100, max_batches=100)
    for round_ in range(10):
        assert fetch(inbox, "alice", round_)
    assert len(inbox.drain()) == 10
    clock.advance(MAX_AGE + 1)
    assert fetch(inbox, "alice", 10, created_at=clock())  # any consider forgets what is too old
    assert len(inbox._seen) == 1  # only alice 10 is remembered: memory stays bounded
    assert len(inbox.drain()) == 1
    for _ in range(3):  # the publisher keeps listing its old batches: never delivered again ...
        assert not offer(inbox, "alice", 0)
    assert inbox.drain() == []
    assert rejections(inbox) == {}  # ... and, delivered once, not counted as rejected either


def test_a_forgotten_stale_batch_is_refused_as_stale_once(clock):
    inbox = make_inbox(clock)
    clock.advance(MAX_AGE + 1)
    assert offer(inbox, "alice", 1, created_at=clock())
    created = clock()
    for _ in range(3):  # a late joiner polling, once a second or so, a peer that still lists an old batch
        assert not offer(inbox, "alice", 0, created_at=T0)
        assert not offer(inbox, "alice", 1, created_at=created)  # in flight: answered already
        clock.advance(1.5)  # pruning runs at most once a second
    assert len(inbox._seen) == 1  # alice 0 was forgotten
    assert rejections(inbox) == {("alice", STALE): 1}


def test_a_batch_in_flight_is_not_forgotten(clock):
    inbox = make_inbox(clock)
    p = publish(make_batch("alice", 0))
    assert inbox.consider(p.announcement, p.descriptor)
    clock.advance(MAX_AGE + 1)  # a slow fetch
    assert not inbox.consider(p.announcement, p.descriptor)
    assert inbox.deliver("alice", p.descriptor, p.batch, len(p.data))
    assert len(inbox.drain()) == 1


def listing(peer: str, rounds: range, created_at: float) -> Announcement:
    """``peer``'s announcement of the batches ``rounds``, all dated ``created_at`` (no payload behind them)."""
    return Announcement(run_id=RUN_ID, peer_id=peer, model="m", adapter="full", tokenizer=TOKENIZER,
                        policy_version=0, published_batches=len(rounds), published_tokens=0, updated_at=created_at,
                        batches=tuple(BatchDescriptor(r, 1, 1, 100, bytes(32), 0, created_at) for r in rounds))


def consider_all(inbox: Inbox, announcement: Announcement) -> None:
    for descriptor in announcement.batches:
        inbox.consider(announcement, descriptor)


def test_a_peer_listing_new_batches_at_every_poll_is_remembered_up_to_what_one_can_list_within_max_age(clock):
    # Re-dating its listing ten times a second (a transport asked to poll now, say), 16 new batches each time:
    # 3,200 in 20 s. It is remembered up to 16 batches per 1-s poll for max_age_s (960), the first seen going first.
    inbox = make_inbox(clock)
    for poll in range(200):
        consider_all(inbox, listing("mallory", range(16 * poll, 16 * (poll + 1)), clock()))
        clock.advance(0.1)
    assert len(inbox._seen) == MAX_ANNOUNCED_BATCHES * int(MAX_AGE)
    counted = dict(rejections(inbox))
    consider_all(inbox, listing("mallory", range(16), T0))  # forgotten, still listed: answered, not counted again
    assert dict(rejections(inbox)) == counted


def test_sybils_listing_batches_are_remembered_up_to_a_bound_in_all(clock, monkeypatch):
    monkeypatch.setattr(inbox_module, "MAX_SEEN", 100, raising=False)  # the bound, which an inbox reads when made
    inbox = make_inbox(clock)
    for sybil in range(50):
        consider_all(inbox, listing(f"sybil-{sybil}", range(8), clock()))
    assert len(inbox._seen) == 100


def test_a_batch_forgotten_for_room_is_still_answered_and_one_in_flight_is_kept(clock, monkeypatch):
    monkeypatch.setattr(inbox_module, "MAX_SEEN", 16, raising=False)
    inbox = make_inbox(clock)
    assert fetch(inbox, "alice", 0) and len(inbox.drain()) == 1
    in_flight = publish(make_batch("alice", 1))
    assert inbox.consider(in_flight.announcement, in_flight.descriptor)
    clock.advance(1)
    for sybil in range(10):
        consider_all(inbox, listing(f"sybil-{sybil}", range(8), clock()))
    assert len(inbox._seen) == 16 and ("alice", 0) not in inbox._seen and ("alice", 1) in inbox._seen
    assert not offer(inbox, "alice", 0)  # delivered, still listed: never fetched again
    assert inbox.deliver("alice", in_flight.descriptor, in_flight.batch, len(in_flight.data))
    assert [item.batch.round for item in inbox.drain()] == [1]
    assert not inbox.consider(in_flight.announcement, in_flight.descriptor)


# --- open_payload -----------------------------------------------------------------------------------


def test_open_payload_accepts_exactly_the_announced_bytes():
    p = publish(make_batch("alice", 0))
    assert open_payload(p.descriptor, p.data) == p.batch


def reason(descriptor, data) -> str:
    with pytest.raises(Rejected) as caught:
        open_payload(descriptor, data)
    return caught.value.reason


def test_open_payload_refusals():
    p = publish(make_batch("alice", 0))
    flipped = bytearray(p.data)
    flipped[len(flipped) // 2] ^= 0xFF
    assert reason(p.descriptor, p.data + b"\x00") == TOO_LARGE
    assert reason(p.descriptor, p.data[:-1]) == FETCH_FAILED  # the stream closed early
    assert reason(p.descriptor, b"") == FETCH_FAILED
    assert reason(p.descriptor, bytes(flipped)) == HASH_MISMATCH

def test_open_payload_decodes_strictly_what_matches_its_hash():
    """A peer may sign an announcement of garbage: size and hash match, the strict decode refuses it."""
    garbage = msgpack.packb({"v": 1, "kind": "batch", "body": {"nonsense": 1}})
    descriptor = replace(publish(make_batch("alice", 0)).descriptor, bytes=len(garbage),
                         sha256=hashlib.sha256(garbage).digest())
    assert reason(descriptor, garbage) == DECODE_ERROR


# --- Inbox.open: charged what decoding takes, before anything is inflated -----------------------------


def texted(batch, text: str = "x"):
    """``batch`` with every completion's text ``text`` repeated as many times as its tokens."""
    groups = tuple(Group(g.group_id, g.task, g.prompt_ids, tuple(replace(c, text=text * len(c.token_ids))
                                                                  for c in g.completions)) for g in batch.groups)
    return replace(batch, groups=groups)


def never_inflated(monkeypatch) -> None:
    """Make inflating any column fail the test: a refusal must come before it."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("a column was inflated")

    monkeypatch.setattr(read_module.CompressedBatch, "inflate", refuse)


def test_open_charges_what_decoding_takes_in_place_of_the_announced_size(clock):
    inbox = make_inbox(clock)
    p = publish(texted(make_batch("alice", 0, tokenizer="tok-b"), "é"))
    assert inbox.consider(p.announcement, p.descriptor)
    assert inbox._held[("alice", 0)] == p.descriptor.bytes  # in flight: its announced size
    batch = inbox.open("alice", p.descriptor, p.data)
    assert batch == p.batch  # another tokenizer: its texts are read
    compressed = read(p.data)
    charged = inbox._held[("alice", 0)]
    assert charged == len(p.data) + compressed.cost(texts=True) > compressed.cost(texts=False) + len(p.data)
    assert inbox.deliver("alice", p.descriptor, batch, len(p.data))
    inbox.drain()
    assert dict(inbox._held) == {}  # drained: the room is free again


def test_open_leaves_the_texts_of_this_nodes_own_tokenizer_compressed(clock):
    inbox = make_inbox(clock)
    p = publish(texted(make_batch("alice", 0)))
    assert inbox.consider(p.announcement, p.descriptor)
    batch = inbox.open("alice", p.descriptor, p.data)
    assert all(group.columns.texts is None for group in batch.groups)
    assert batch == p.batch.without_texts()
    assert inbox._held[("alice", 0)] == len(p.data) + read(p.data).cost(texts=False)


def test_a_batch_that_decodes_beyond_the_whole_buffer_is_refused_uninflated_and_charged(clock, monkeypatch):
    p = publish(make_batch("alice", 0, groups=4, group_size=8))
    cost = len(p.data) + read(p.data).cost()
    small = make_inbox(clock, max_bytes=cost - 1)
    assert small.consider(p.announcement, p.descriptor)  # its wire bytes fit
    never_inflated(monkeypatch)
    with pytest.raises(Rejected) as caught:
        small.open("alice", p.descriptor, p.data)
    assert caught.value.reason == TOO_LARGE
    small.fail("alice", p.descriptor, caught.value.reason)
    assert rejections(small) == {("alice", TOO_LARGE): 1}
    assert small.scores()["alice"].bad == 1  # a fault of the peer's
    assert dict(small._held) == {}


def test_a_batch_the_held_batches_leave_no_room_for_is_refused_uninflated_and_not_charged(clock, monkeypatch):
    first, second = (publish(make_batch(peer, 0, groups=4, group_size=8)) for peer in ("alice", "bob"))
    cost = len(first.data) + read(first.data).cost()
    inbox = make_inbox(clock, max_bytes=cost + len(second.data) + read(second.data).cost() - 1)
    assert inbox.consider(first.announcement, first.descriptor) and inbox.consider(second.announcement,
                                                                                   second.descriptor)
    assert inbox.deliver("alice", first.descriptor, inbox.open("alice", first.descriptor, first.data),
                         len(first.data))
    never_inflated(monkeypatch)
    with pytest.raises(Rejected) as caught:
        inbox.open("bob", second.descriptor, second.data)
    assert caught.value.reason == BUFFER_FULL
    inbox.fail("bob", second.descriptor, caught.value.reason)
    assert "bob" not in inbox.scores() or inbox.scores()["bob"].bad == 0  # lack of room says nothing of bob
    assert set(inbox._held) == {("alice", 0)}  # alice's batch, still held, keeps its charge


def test_texts_longer_than_this_node_could_train_on_are_refused_before_inflating(clock, monkeypatch):
    fits = publish(texted(make_batch("alice", 0, tokenizer="tok-b"), "ab"))
    long_text = max(len(c.text.encode()) for g in fits.batch.groups for c in g.completions)
    inbox = make_inbox(clock, max_text_bytes=long_text)
    assert inbox.consider(fits.announcement, fits.descriptor)
    assert inbox.open("alice", fits.descriptor, fits.data) == fits.batch  # exactly at the limit
    over = publish(texted(make_batch("alice", 1, tokenizer="tok-b"), "abc"))
    assert inbox.consider(over.announcement, over.descriptor)
    never_inflated(monkeypatch)
    with pytest.raises(Rejected) as caught:
        inbox.open("alice", over.descriptor, over.data)
    assert caught.value.reason == TOO_LARGE and f"none longer than {long_text}" in str(caught.value)


def test_the_text_limit_is_no_concern_for_a_batch_of_this_nodes_own_tokenizer(clock):
    inbox = make_inbox(clock, max_text_bytes=1)
    p = publish(texted(make_batch("alice", 0), "abc"))
    assert inbox.consider(p.announcement, p.descriptor)
    assert inbox.open("alice", p.descriptor, p.data) == p.batch.without_texts()  # its texts are never read


def test_open_refuses_what_open_payload_refuses(clock):
    inbox = make_inbox(clock)
    p = publish(make_batch("alice", 0))
    assert inbox.consider(p.announcement, p.descriptor)
    for data, expected in ((p.data + b"\x00", TOO_LARGE), (p.data[:-1], FETCH_FAILED)):
        with pytest.raises(Rejected) as caught:
            inbox.open("alice", p.descriptor, data)
        assert caught.value.reason == expected


# --- Outbox -----------------------------------------------------------------------------------------


def test_outbox_add_encodes_and_describes(clock):
    outbox = Outbox(RUN_ID, "alice", clock=clock)
    batch = make_batch("alice", 7, created_at=T0 - 5, policy_version=3)
    p = publish(batch)
    descriptor = outbox.add(batch)
    assert descriptor == p.descriptor
    assert (descriptor.groups, descriptor.tokens, descriptor.policy_version) == (2, batch.num_completion_tokens, 3)
    assert outbox.payload(7) == encode(batch)
    assert outbox.payload(8) is None
    assert outbox.published == (1, len(p.data))


def test_outbox_keeps_only_the_newest(clock):
    outbox = Outbox(RUN_ID, "alice", keep=2, clock=clock)
    for round_ in (0, 1, 5):
        outbox.add(make_batch("alice", round_))
    assert outbox.payload(0) is None and outbox.payload(1) and outbox.payload(5)
    assert [d.round for d in outbox.announcement().batches] == [1, 5]
    assert outbox.published[0] == 3  # totals count everything ever published


@pytest.mark.parametrize("keep", [0, MAX_ANNOUNCED_BATCHES + 1])
def test_outbox_keep_is_bounded_by_what_an_announcement_lists(keep):
    with pytest.raises(ValueError):
        Outbox(RUN_ID, "alice", keep=keep)


@pytest.mark.parametrize("batch", [
    make_batch("bob", 1),  # another peer's
    make_batch("alice", 1, run_id="run-b"),  # another run's
    make_batch("alice", 3),  # the same round again
    make_batch("alice", 2),  # a lower one
])
def test_outbox_refuses_what_this_node_must_not_publish(clock, batch):
    outbox = Outbox(RUN_ID, "alice", clock=clock)
    outbox.add(make_batch("alice", 3))
    before = outbox.announcement()
    with pytest.raises(ValueError):
        outbox.add(batch)
    assert outbox.announcement() == before
    assert outbox.published == (1, len(encode(make_batch("alice", 3))))


def test_outbox_announcement_lists_descriptors_and_totals(clock):
    outbox = Outbox(RUN_ID, "alice", clock=clock)
    assert outbox.announcement() is None  # nothing to announce yet
    batches = [make_batch("alice", round_, policy_version=round_, model="m", adapter="lora") for round_ in range(3)]
    descriptors = [outbox.add(batch) for batch in batches]
    clock.advance(2)
    announcement = outbox.announcement()
    assert announcement.batches == tuple(descriptors)
    assert (announcement.run_id, announcement.peer_id, announcement.tokenizer) == (RUN_ID, "alice", TOKENIZER)
    assert (announcement.model, announcement.adapter, announcement.policy_version) == ("m", "lora", 2)
    assert announcement.published_batches == 3
    assert announcement.published_tokens == sum(b.num_completion_tokens for b in batches)
    assert announcement.updated_at == T0 + 2
    assert decode_announcement(encode_announcement(announcement)) == announcement  # it fits the wire


def test_a_full_outbox_announcement_fits_the_wire(clock):
    outbox = Outbox(RUN_ID, "alice", clock=clock)
    for round_ in range(MAX_ANNOUNCED_BATCHES + 4):
        outbox.add(make_batch("alice", round_))
    announcement = outbox.announcement()
    assert len(announcement.batches) == MAX_ANNOUNCED_BATCHES
    assert decode_announcement(encode_announcement(announcement)) == announcement


def test_a_batch_refused_for_lack_of_room_is_fetched_once_room_frees(clock):
    inbox = make_inbox(clock, per_peer_quota=1)
    first, second = publish(make_batch("alice", 0)), publish(make_batch("alice", 1))
    assert inbox.consider(first.announcement, first.descriptor)
    for _ in range(3):  # polls while alice's quota is full: refused, counted once
        assert not inbox.consider(second.announcement, second.descriptor)
    assert rejections(inbox) == {("alice", PEER_QUOTA): 1}
    assert inbox.deliver("alice", first.descriptor, first.batch, len(first.data))
    assert len(inbox.drain()) == 1  # the trainer took it: room again
    assert inbox.consider(second.announcement, second.descriptor)
    assert not inbox.consider(second.announcement, second.descriptor)  # now answered for good
