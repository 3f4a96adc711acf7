"""The inbox in rounds mode (``Inbox.set_round``, ``Inbox.peer_rounds``) and its seen set (``seen.py``), alone, with a
fake clock and no network.

Run: python -m pytest tests/test_inbox_rounds.py -q

In rounds mode the inbox hands over only batches of the node's round or earlier; later ones stay queued and charged
to their peer's quota and the buffer until the node reaches them, or are dropped once stale; one too many rounds
ahead is not fetched until the node comes closer. The seen set prunes in the order entries were first seen, looking
at no entry it does not drop.
"""

import random
from dataclasses import replace

import pytest
from helpers.swarm import RUN_ID, T0, TOKENIZER, FakeClock, make_batch, publish

from ftis.node.swarm.exchange.inbox import Inbox
from ftis.node.swarm.exchange.limits import InboxLimits
from ftis.node.swarm.exchange.reasons import AHEAD, PEER_QUOTA, STALE
from ftis.node.swarm.exchange.seen import SeenSet

MAX_AGE = 60.0
LIMITS = InboxLimits(max_age_s=MAX_AGE, per_peer_quota=2, max_batches=8, max_bytes=1 << 20)


@pytest.fixture
def clock():
    return FakeClock()


def make_inbox(clock, **limits) -> Inbox:
    return Inbox(RUN_ID, TOKENIZER, replace(LIMITS, **limits), clock)


def fetch(inbox: Inbox, peer: str, round_: int, created_at: float = T0, run_id: str = RUN_ID) -> bool:
    """Announce (through ``choose``, as a transport's poll does) and, if chosen, deliver."""
    p = publish(make_batch(peer, round_, created_at, run_id=run_id))
    chosen = inbox.choose([p.announcement], 0, 1.0, random.Random(0))
    return bool(chosen) and inbox.deliver(peer, p.descriptor, p.batch, len(p.data))


def rounds_of(inbox: Inbox) -> list[int]:
    return [item.batch.round for item in inbox.drain()]


def test_without_a_round_every_batch_is_handed_over(clock):
    inbox = make_inbox(clock)
    assert fetch(inbox, "alice", 0) and fetch(inbox, "alice", 100)
    assert rounds_of(inbox) == [0, 100]


def test_a_later_rounds_batch_stays_queued_and_charged_until_the_node_reaches_it(clock):
    inbox = make_inbox(clock)  # quota 2
    inbox.set_round(0, ahead=4)
    assert fetch(inbox, "alice", 0) and fetch(inbox, "alice", 2)
    assert rounds_of(inbox) == [0]
    assert fetch(inbox, "alice", 3)
    assert not fetch(inbox, "alice", 4)  # round 2's and 3's batches, held, fill the quota
    assert inbox.stats().rejections == {("alice", PEER_QUOTA): 1}
    assert set(inbox._held) == {("alice", 2), ("alice", 3)}
    inbox.set_round(1, ahead=4)
    assert rounds_of(inbox) == []
    inbox.set_round(2, ahead=4)
    assert rounds_of(inbox) == [2]
    assert set(inbox._held) == {("alice", 3)} and fetch(inbox, "alice", 4)


def test_a_batch_beyond_the_window_is_not_fetched_until_the_node_comes_closer(clock):
    inbox = make_inbox(clock)
    inbox.set_round(0, ahead=4)
    assert fetch(inbox, "alice", 4)
    for _ in range(3):  # asked about at every poll, counted once
        assert not fetch(inbox, "alice", 5)
    assert inbox.stats().rejections == {("alice", AHEAD): 1}
    assert inbox.scores()["alice"].bad == 0  # being ahead says nothing against a peer
    inbox.set_round(1, ahead=4)
    assert fetch(inbox, "alice", 5)


def test_a_held_batch_is_dropped_once_stale_and_its_charge_freed(clock):
    inbox = make_inbox(clock)
    inbox.set_round(0, ahead=4)
    assert fetch(inbox, "alice", 3)
    clock.advance(MAX_AGE - 1)
    assert rounds_of(inbox) == [] and set(inbox._held) == {("alice", 3)}
    clock.advance(2)
    assert rounds_of(inbox) == [] and dict(inbox._held) == {}
    assert inbox.stats().rejections == {("alice", STALE): 1}
    inbox.set_round(3, ahead=4)
    assert rounds_of(inbox) == []


def test_peer_rounds_says_the_newest_round_each_peer_delivered_and_announced(clock):
    inbox = make_inbox(clock)
    inbox.set_round(0, ahead=4)
    assert fetch(inbox, "alice", 2) and fetch(inbox, "alice", 1)
    assert not fetch(inbox, "bob", 1000)
    assert not fetch(inbox, "carol", 7, created_at=T0 - MAX_AGE - 1)  # stale: claims nothing
    assert not fetch(inbox, "dave", 9, run_id="run-b")  # another run: claims nothing here
    rounds = inbox.peer_rounds()
    assert rounds.delivered == {"alice": 2}
    assert rounds.announced == {"alice": 1, "bob": 1000}  # each peer's latest listing
    assert rounds.newest("alice") == 2 and rounds.newest("bob") == 1000 and rounds.newest("carol") == -1


class Counted(float):
    """A date that counts how often it is compared."""

    comparisons = 0

    def __lt__(self, other):
        Counted.comparisons += 1
        return float(self) < float(other)

    def __gt__(self, other):
        Counted.comparisons += 1
        return float(self) > float(other)


def test_pruning_the_seen_set_looks_at_no_entry_it_does_not_drop():
    seen = SeenSet(MAX_AGE, per_peer=100_000, total=100_000, max_peers=10)
    for k in range(10_000):
        seen.add(("sybil", k), Counted(T0 + (0 if k < 100 else 10)), T0, {})
    Counted.comparisons = 0
    seen.prune(T0 + MAX_AGE, {})
    assert len(seen) == 10_000 and Counted.comparisons == 1
    Counted.comparisons = 0
    seen.prune(T0 + MAX_AGE + 1, {})  # the 100 first seen are stale
    assert len(seen) == 9_900 and Counted.comparisons <= 3 * 100 + 1


def test_the_seen_set_keeps_held_entries_and_drops_a_peers_first_seen_past_its_bound():
    seen = SeenSet(MAX_AGE, per_peer=3, total=100, max_peers=10)
    held = {("alice", 0): 100}
    for k in range(5):
        seen.add(("alice", k), T0 + k, T0, held)
    assert sorted(seen) == [("alice", 0), ("alice", 3), ("alice", 4)]
    assert seen.answered(("alice", 2), T0 + 2) and not seen.answered(("alice", 5), T0 + 5)
    seen.prune(T0 + MAX_AGE + 10, held)
    assert list(seen) == [("alice", 0)]
