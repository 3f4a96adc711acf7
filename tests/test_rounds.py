"""The loop's two modes over the in-memory transport: ``async`` never waits; ``rounds`` waits up to its
deadline for each live peer's batch of the round, counts the peers that missed it, and falls into
step with peers that are ahead — with the majority of them, not with one peer's claim — and stops
waiting for a peer that keeps missing rounds. (Hostile peers in rounds mode: tests/test_rounds_hostile.py.)"""

import time

import pytest
from helpers.nodes import LIMITS, build_node, make_node, node_config

from ftis.node.intake.rounds_barrier import MAX_JUMP_ROUND, MISSED_ROUNDS_IGNORED, ON_TIME_ROUNDS
from ftis.node.swarm.exchange.reasons import LATE_ROUND, MISSED_ROUND
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.node.swarm.peers.reputation import FAILED_WEIGHT, MISSED_WEIGHT
from ftis.protocol.announcement import Announcement, Reach, encode_announcement
from ftis.protocol.limits import MAX_ROUND

DEADLINE = 0.4


def rounds_node(hub: MemoryHub, peer_id: str):
    return make_node(hub, peer_id, loop={"mode": "rounds", "round_deadline_s": DEADLINE},
                     generation={"prompts_per_round": 1, "group_size": 4, "max_new_tokens": 3})


def test_a_lone_node_in_rounds_mode_does_not_wait():
    node = rounds_node(MemoryHub(), "alone")
    report = node.run_round()
    assert report.waited_seconds < DEADLINE / 2 and report.late_peers == 0
    assert node.round == 1


def test_rounds_mode_waits_for_a_peer_that_is_behind_then_gives_up_at_the_deadline():
    hub = MemoryHub()
    peer = make_node(hub, "peer", generation={"prompts_per_round": 1, "group_size": 4, "max_new_tokens": 3})
    node = rounds_node(hub, "node")
    peer.run_round()  # the peer's batch of round 0
    first = node.run_round()  # round 0: the peer's batch is there, nothing to wait for
    assert first.waited_seconds < DEADLINE / 2 and first.late_peers == 0
    assert first.peer_groups_received == 1
    second = node.run_round()  # round 1: the peer has not published it
    assert DEADLINE <= second.waited_seconds < DEADLINE + 1.0
    assert second.late_peers == 1 and second.peer_groups_received == 0
    peer.run_round()  # the peer's round 1 arrives: the next round trains on it without waiting again
    third = node.run_round()
    assert third.peer_groups_received == 1
    assert third.late_peers == 1  # round 2 of the peer is still missing at this round's deadline


def test_a_joining_node_starts_at_the_round_of_a_peer_that_is_ahead_and_counts_an_early_batch():
    hub = MemoryHub()
    peer = make_node(hub, "peer", generation={"prompts_per_round": 1, "group_size": 4, "max_new_tokens": 3})
    node = rounds_node(hub, "node")
    peer.round = 7  # the peer has been running for a while
    peer.run_round()
    report = node.run_round()  # its first round is the swarm's: the peer's batch of it is out already
    assert report.round == 7 and report.peer_groups_received == 1
    assert report.late_peers == 0 and report.waited_seconds < DEADLINE / 2
    assert node.round == 8
    peer.run_round()
    peer.run_round()  # the peer's rounds 8 and 9: round 9's batch arrives early and is held for round 9
    report = node.run_round()
    assert report.round == 8 and report.peer_groups_received == 1
    assert node.round == 9  # the peer reached round 9: the node falls into step
    report = node.run_round()  # the batch held for round 9 counts: no wait, and it is trained on now
    assert report.round == 9 and report.peer_groups_received == 1
    assert report.late_peers == 0 and report.waited_seconds < DEADLINE / 2


def test_async_mode_never_waits_for_a_missing_peer():
    hub = MemoryHub()
    peer = make_node(hub, "peer", generation={"prompts_per_round": 1, "group_size": 4, "max_new_tokens": 3})
    node = make_node(hub, "node", generation={"prompts_per_round": 1, "group_size": 4, "max_new_tokens": 3})
    peer.run_round()
    node.run_round()
    report = node.run_round()  # the peer published nothing new
    assert report.waited_seconds == 0.0 and report.late_peers == 0 and report.peer_groups_received == 0


def test_rounds_mode_waits_for_min_peers_to_appear():
    hub = MemoryHub()
    node = make_node(hub, "node", loop={"mode": "rounds", "round_deadline_s": DEADLINE, "min_peers": 1},
                     generation={"prompts_per_round": 1, "group_size": 4, "max_new_tokens": 3})
    report = node.run_round()  # nobody else in the swarm: wait the whole deadline for one peer
    assert report.waited_seconds >= DEADLINE and report.late_peers == 1
    peer = make_node(hub, "peer", generation={"prompts_per_round": 1, "group_size": 4, "max_new_tokens": 3})
    peer.round = 1
    peer.run_round()
    report = node.run_round()
    assert report.waited_seconds < DEADLINE / 2 and report.late_peers == 0 and report.peer_groups_received == 1


def test_nodes_that_start_together_look_for_each_other_briefly_not_for_a_whole_deadline(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    from ftis.node.intake import rounds_barrier

    monkeypatch.setattr(rounds_barrier, "JOIN_LOOK_S", 0.5)  # a peer announces with its first batch: none shows yet
    hub = MemoryHub()
    nodes = [make_node(hub, name, loop={"mode": "rounds", "round_deadline_s": 30.0, "min_peers": 1},
                       generation={"prompts_per_round": 1, "group_size": 4, "max_new_tokens": 3}) for name in "ab"]
    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(lambda node: node.run_round(), nodes))
    assert time.monotonic() - started < 15.0  # each waited half a second for the other, then for its batch
    assert [report.round for report in reports] == [0, 0] and all(r.peer_groups_received == 1 for r in reports)


def test_a_live_peer_beyond_the_window_counts_towards_min_peers_and_is_not_waited_for():
    hub = MemoryHub()
    peer = make_node(hub, "peer", generation={"prompts_per_round": 1, "group_size": 4, "max_new_tokens": 3})
    node = make_node(hub, "node", loop={"mode": "rounds", "round_deadline_s": DEADLINE, "min_peers": 1},
                     generation={"prompts_per_round": 1, "group_size": 4, "max_new_tokens": 3})
    peer.run_round()
    assert node.run_round().peer_groups_received == 1  # round 0, together
    peer.round = 50  # the peer moves far ahead (a long evaluation of this node's, say)
    peer.run_round()
    report = node.run_round()  # the peer is there: min_peers is met, and no batch of this round will come from it
    assert report.waited_seconds < DEADLINE / 2 and report.late_peers == 0
    assert node.round == 1 + node.config.loop.rounds_ahead  # one peer moves a running node a window at a time


def test_rounds_mode_does_not_wait_for_a_muted_peer():
    hub = MemoryHub()
    peer = make_node(hub, "peer", generation={"prompts_per_round": 1, "group_size": 4, "max_new_tokens": 3})
    node = rounds_node(hub, "node")
    peer.run_round()
    node.run_round()
    for _ in range(2):  # every completion of the peer's forged: divergence-filtered
        node.transport.report_filtered("peer", batches=1, completions=4, filtered=4)
    assert node.transport.scores()["peer"].muted_until is not None
    report = node.run_round()  # the muted peer has not published round 1: nobody to wait for
    assert report.waited_seconds < DEADLINE / 2 and report.late_peers == 0


SMALL = {"prompts_per_round": 1, "group_size": 4, "max_new_tokens": 3}


def test_one_peers_claim_of_a_far_round_moves_no_node_that_has_other_peers():
    # Mallory's batch says round 2**40 - 1; the honest peer is at round 3. The node follows the majority of
    # its live peers (both must have reached a round), so it jumps to 3, and keeps publishing after it.
    hub = MemoryHub()
    honest = make_node(hub, "honest", generation=SMALL)
    mallory = make_node(hub, "mallory", generation=SMALL)
    node = rounds_node(hub, "node")
    honest.round, mallory.round = 3, MAX_ROUND
    honest.run_round()
    mallory.run_round()
    assert node.run_round().round == 3
    for _ in range(2):
        honest.run_round()
        node.run_round()
    assert node.round == 6 and node.transport.stats().published_batches == 3


def test_a_lone_peers_claim_moves_a_joining_node_only_as_far_as_it_can_still_publish():
    # A joining node takes the swarm's round before its first round, even from one peer (a running node does
    # not: tests/test_rounds_hostile.py); never past MAX_JUMP_ROUND.
    hub = MemoryHub()
    mallory = make_node(hub, "mallory", generation=SMALL)
    node = rounds_node(hub, "node")
    mallory.round = MAX_ROUND
    mallory.run_round()
    assert node.run_round().round == MAX_JUMP_ROUND
    node.run_round()  # the round after it encodes and publishes too
    assert node.transport.stats().published_batches == 2 and node.round == MAX_JUMP_ROUND + 2


def test_a_ghost_member_costs_a_few_deadlines_and_is_charged_for_each():
    # Announced with no batch, refreshed forever: the node waits for it, charges it each missed deadline,
    # and after MISSED_ROUNDS_IGNORED of them no longer waits, until it delivers a batch again.
    hub = MemoryHub()
    node = rounds_node(hub, "node")
    ghost = Announcement(run_id=node.config.swarm.run_id, peer_id="ghost", model="m", adapter="full",
                         tokenizer=node.policy.fingerprint, policy_version=0, published_batches=0,
                         published_tokens=0, updated_at=time.time(), batches=())
    hub.put_raw_announcement("ghost", encode_announcement(ghost))
    waits = [node.run_round().waited_seconds for _ in range(MISSED_ROUNDS_IGNORED + 2)]
    assert all(wait >= DEADLINE for wait in waits[:MISSED_ROUNDS_IGNORED]), waits
    assert all(wait < DEADLINE / 2 for wait in waits[MISSED_ROUNDS_IGNORED:]), waits
    assert node.transport.stats().rejections[("ghost", MISSED_ROUND)] == MISSED_ROUNDS_IGNORED
    assert node.transport.scores()["ghost"].bad > 0


def test_under_a_fetch_budget_a_round_waits_for_the_batches_it_chose_not_every_live_member():
    hub = MemoryHub()
    small = {"prompts_per_round": 1, "group_size": 4, "max_new_tokens": 3}
    peers = [make_node(hub, f"peer{i}", generation=small) for i in range(3)]
    config = node_config(loop={"mode": "rounds", "round_deadline_s": DEADLINE}, generation=small,
                         swarm={"fetch_budget": 1})
    node = build_node(config, lambda fingerprint: MemoryTransport(hub, config.swarm.run_id, "node", fingerprint,
                                                                  LIMITS, fetch_budget=1))
    for peer in peers:
        peer.run_round()
    first = node.run_round()  # round 0: one batch of three is what it wants
    assert first.waited_seconds < DEADLINE / 2 and first.late_peers == 0 and first.peer_groups_received == 1
    peers[2].run_round()  # only one peer reaches round 1
    second = node.run_round()
    assert second.waited_seconds < DEADLINE / 2 and second.late_peers == 0
    third = node.run_round()  # round 2: nobody has it; the one batch it wants is missing at the deadline
    assert third.waited_seconds >= DEADLINE and third.late_peers == 1
    assert node.transport.stats().rejected(MISSED_ROUND) == 0  # no peer was asked for it: nobody is charged


def test_rounds_mode_does_not_wait_for_a_member_that_says_it_is_unreachable():
    # A node behind a NAT with no relay slot announces itself unreachable: no one can fetch its batches, so no
    # round waits for them, and it is not charged for the rounds it "misses".
    hub = MemoryHub()
    node = rounds_node(hub, "node")
    behind_nat = Announcement(run_id=node.config.swarm.run_id, peer_id="behind-nat", model="m", adapter="full",
                              tokenizer=node.policy.fingerprint, policy_version=0, published_batches=0,
                              published_tokens=0, updated_at=time.time(), batches=(), reach=Reach("unreachable"))
    hub.put_raw_announcement("behind-nat", encode_announcement(behind_nat))
    waits = [node.run_round().waited_seconds for _ in range(2)]
    assert all(wait < DEADLINE / 2 for wait in waits), waits
    assert node.transport.stats().rejected(MISSED_ROUND) == 0
    assert [m.reach for m in node.transport.members() if m.peer_id == "behind-nat"] == ["unreachable"]


def test_a_peer_late_once_after_rounds_on_time_is_charged_as_a_slow_link_and_not_muted():
    hub = MemoryHub()
    peer = make_node(hub, "peer", generation=SMALL)
    node = rounds_node(hub, "node")
    for _ in range(ON_TIME_ROUNDS):
        peer.round = node.round
        peer.run_round()
        assert node.run_round().waited_seconds < DEADLINE / 2
    waits = [node.run_round().waited_seconds for _ in range(2)]  # the peer misses two rounds in a row
    assert all(wait >= DEADLINE for wait in waits), waits
    rejections = node.transport.stats().rejections
    assert rejections[("peer", LATE_ROUND)] == 1  # the first, after its record: as a failed fetch
    assert rejections[("peer", MISSED_ROUND)] == 1  # the second: its record is gone, at full weight
    score = node.transport.scores()["peer"]
    assert score.bad == pytest.approx(FAILED_WEIGHT + MISSED_WEIGHT, rel=1e-3)
    assert score.muted_until is None
