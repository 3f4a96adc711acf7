"""The sampled directory and the fetch budget (``swarm/dht/sampling.py``, ``Inbox.choose``), with no network.

Run: python -m pytest tests/test_sampling.py -q

Reads: each poll takes the next K shards of the node's own random order (K = S: everything, every poll), more
while it remembers too few peers; memory: what the last few polls returned, newest per peer. Fetches: the
freshest batches from distinct peers (random among equals), as many as the budget leaves room for.
"""

import random
from collections import Counter
from dataclasses import replace

import pytest
from helpers.swarm import RUN_ID, T0, TOKENIZER, FakeClock, make_batch, publish

from ftis.node.config import SwarmConfig
from ftis.node.swarm.dht.sampling import ReadSettings, Sampler, ShardOrder, read_settings
from ftis.node.swarm.exchange import inbox as inbox_module
from ftis.node.swarm.exchange.budget import Offer, pick, rank_offers
from ftis.node.swarm.exchange.inbox import Inbox
from ftis.node.swarm.exchange.limits import InboxLimits
from ftis.node.swarm.memory import MemoryHub, MemoryTransport

LIMITS = InboxLimits(max_age_s=60.0, per_peer_quota=4, max_batches=16, max_bytes=1 << 20)


def settings(**changes) -> ReadSettings:
    return replace(ReadSettings(shards=8, per_poll=2, most_per_poll=2, remember_polls=1, want_peers=0), **changes)


# ---------------------------------------------------------------- which shards a poll reads


def test_each_node_covers_every_shard_once_every_s_over_k_polls_in_its_own_order():
    first, second = ShardOrder(16, random.Random(1)), ShardOrder(16, random.Random(2))
    a = [first.take(4) for _ in range(4)]
    b = [second.take(4) for _ in range(4)]
    assert sorted(s for poll in a for s in poll) == list(range(16))
    assert sorted(s for poll in b for s in poll) == list(range(16))
    assert a != b  # two nodes read different shards at the same time
    assert [first.take(4) for _ in range(4)] == a  # and round again


def test_k_equal_to_s_reads_every_shard_every_poll_and_remembers_one_poll():
    sampler: Sampler[str] = Sampler(settings(shards=4, per_poll=4, most_per_poll=4), random.Random(0))
    assert sorted(sampler.shards_to_read()) == [0, 1, 2, 3]
    sampler.remember([("a", "a1"), ("b", "b1")])
    assert sorted(sampler.shards_to_read()) == [0, 1, 2, 3]
    sampler.remember([("a", "a2")])  # b's record is gone from this read: b is gone (today's behaviour)
    assert sampler.listings() == {"a": "a2"}


def test_a_node_that_sees_too_few_peers_reads_more_within_its_budget_then_back_to_k():
    sampler: Sampler[int] = Sampler(settings(shards=64, per_poll=2, most_per_poll=8, want_peers=10),
                                    random.Random(0))
    counts = []
    for _ in range(4):  # a small run: nothing found
        counts.append(len(sampler.shards_to_read()))
        sampler.remember([])
    assert counts == [4, 8, 8, 8]  # doubling from K, never past most_per_poll
    sampler.remember([(f"p{i}", i) for i in range(12)])
    assert len(sampler.shards_to_read()) == 2


def test_memory_holds_what_the_last_polls_returned_newest_per_peer_whatever_n():
    sampler: Sampler[int] = Sampler(settings(remember_polls=3), random.Random(0))
    for poll in range(100):  # 100 polls, 20 new peers each: 2,000 peers seen
        sampler.remember([(f"p{poll}-{i}", poll) for i in range(20)] + [("steady", poll)])
        assert len(sampler) <= 3 * 20 + 1
    listings = sampler.listings()
    assert listings["steady"] == 99 and len(listings) == 61
    assert {value for value in listings.values()} == {97, 98, 99}


# ---------------------------------------------------------------- which batches are fetched


def offers(*spec: tuple[str, float]) -> list[Offer[str]]:
    return [Offer(peer, created_at, f"{peer}@{created_at}") for peer, created_at in spec]


def test_offers_rank_freshest_first_equals_at_random_better_scored_first_ahead_dated_last_suspects_after_all():
    now = 1000.0
    spec = offers(("old", 990.0), ("ahead", 1003.0), ("fresh-a", 999.5), ("fresh-b", 999.2), ("lower", 999.6),
                  ("suspect", 999.9))
    firsts = Counter()
    for seed in range(200):
        ranked = [o.peer_id for o in rank_offers(spec, now, 1.0, random.Random(seed), {"lower": 0.8,
                                                                                      "suspect": 0.5})]
        # a lower score waits behind equals; ahead ranks stalest; a suspect (one refusal) after everyone
        assert ranked[2:] == ["lower", "old", "ahead", "suspect"]
        firsts[ranked[0]] += 1
    assert set(firsts) == {"fresh-a", "fresh-b"} and min(firsts.values()) > 60  # ties broken at random


def test_offers_older_than_the_horizon_are_left_out():
    spec = offers(("fresh", 999.0), ("stale", 990.0))
    assert [o.peer_id for o in rank_offers(spec, 1000.0, 1.0, random.Random(0), horizon_s=2.5)] == ["fresh"]


def test_pick_takes_one_batch_per_peer_none_from_busy_peers_only_what_is_accepted_up_to_the_room():
    ranked = offers(("a", 5), ("a", 4), ("b", 4), ("c", 3), ("d", 2), ("e", 1))
    refused = {"c@3"}
    chosen = pick(ranked, 3, busy_peers={"b"}, accept=lambda o: o.item not in refused)
    assert [o.item for o in chosen] == ["a@5", "d@2", "e@1"]
    assert pick(ranked, 0, (), lambda o: True) == []


def announce(peer: str, created_at: float, round_: int = 0):
    return publish(make_batch(peer, round_, created_at)).announcement


def test_the_inbox_without_a_budget_takes_every_fresh_batch():
    inbox = Inbox(RUN_ID, TOKENIZER, LIMITS, FakeClock())
    announcements = [announce(f"p{i}", T0 - i) for i in range(6)]
    assert len(inbox.choose(announcements, 0, 1.0, random.Random(0))) == 6


def test_a_budget_fetches_the_freshest_from_distinct_peers_and_refills_as_the_trainer_drains():
    clock = FakeClock()
    inbox = Inbox(RUN_ID, TOKENIZER, LIMITS, clock)
    announcements = [announce(f"p{i}", T0 - 5 * i) for i in range(6)]  # p0 freshest
    chosen = inbox.choose(announcements, 2, 1.0, random.Random(0))
    assert [a.peer_id for a, _ in chosen] == ["p0", "p1"]
    assert inbox.choose(announcements, 2, 1.0, random.Random(0)) == []  # both in flight: no room
    for announcement, descriptor in chosen:
        inbox.fail(announcement.peer_id, descriptor, inbox_module.FETCH_FAILED)  # settled: room again
    assert [a.peer_id for a, _ in inbox.choose(announcements, 2, 1.0, random.Random(0))] == ["p2", "p3"]


def test_a_memory_transport_under_a_budget_hands_over_that_many_batches_a_call_from_distinct_peers():
    hub, clock = MemoryHub(), FakeClock()
    publishers = [MemoryTransport(hub, RUN_ID, f"p{i}", TOKENIZER, LIMITS, clock) for i in range(8)]
    for i, publisher in enumerate(publishers):
        for round_ in range(2):
            publisher.publish(make_batch(f"p{i}", round_, T0 - 10 * i - 5 + round_))
    node = MemoryTransport(hub, RUN_ID, "node", TOKENIZER, LIMITS, clock, fetch_budget=3, rng=random.Random(0))
    first = node.receive()
    assert [(r.peer_id, r.batch.round) for r in first] == [("p0", 1), ("p1", 1), ("p2", 1)]
    assert len({r.peer_id for r in node.receive()}) == 3  # next step: three more


def test_tables_per_peer_are_capped(monkeypatch):
    monkeypatch.setattr(inbox_module, "MAX_PEERS_TRACKED", 10)
    inbox = Inbox(RUN_ID, TOKENIZER, LIMITS, FakeClock())
    for i in range(50):
        inbox.reject_announcement(f"sybil{i}", b"garbage")
    assert len(inbox._bad_announcements) == 10


# ---------------------------------------------------------------- settings


def test_the_settings_are_validated_in_one_place_and_shown_in_one_line():
    assert read_settings(SwarmConfig()) == ReadSettings(shards=4, per_poll=4, most_per_poll=4, remember_polls=1,
                                                       want_peers=16)
    large = SwarmConfig(shards=625, shards_per_poll=2, max_shards_per_poll=16, remember_polls=4, read_beam_size=2,
                        fetch_budget=4)
    assert read_settings(large).most_per_poll == 16
    assert "625 shards, 2 read per poll (up to 16" in large.sampling_line()
    assert "fetch budget 4 batches" in large.sampling_line()
    assert "all read per poll" in SwarmConfig().sampling_line()
    for bad in ({"shards": 4, "shards_per_poll": 5}, {"shards": 64, "shards_per_poll": 4, "max_shards_per_poll": 2},
                {"fetch_budget": 65}, {"shards": 1025}):
        with pytest.raises(ValueError):
            SwarmConfig(**bad)


def test_a_nodes_directory_settings_reach_status_through_its_peer_view(tmp_path):
    from ftis.node.swarm.peers.peer_view import PeerView, read_peer_view, write_peer_view

    line = SwarmConfig(shards=64, shards_per_poll=2, fetch_budget=4).sampling_line()
    write_peer_view(tmp_path, PeerView(1.0, 3, {}, {}, directory=line))
    assert read_peer_view(tmp_path).directory == line
    (tmp_path / "peers.json").write_text('{"time": 1.0, "round": 3, "peers": {}}')  # an older node's file
    assert read_peer_view(tmp_path).directory == ""
