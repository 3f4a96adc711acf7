"""Hostile peers against a node in rounds mode, each on real tiny nodes over the in-memory transport: batches
numbered far ahead are never fetched, nearer ones stay charged to their peer until the node reaches their round
(or they grow stale), one peer cannot drag a running node far away, and a peer that withholds its batches is muted
and no longer waited for.

Run: python -m pytest tests/test_rounds_hostile.py -q
"""

import time
from dataclasses import replace

from helpers.nodes import LIMITS, build_node, make_node, node_config
from helpers.swarm import ShiftedClock, make_batch

from ftis.node.swarm.exchange.reasons import PEER_QUOTA, STALE
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.protocol.limits import MAX_ROUND

DEADLINE = 0.4
SMALL = {"prompts_per_round": 1, "group_size": 4, "max_new_tokens": 3}
ROUNDS = {"mode": "rounds", "round_deadline_s": DEADLINE}
WINDOW = 4  # loop.rounds_ahead's default: the most a running node moves on a round short of two peers' word


def rounds_node(hub: MemoryHub, peer_id: str = "node", clock=time.time, **limits):
    """A node in rounds mode on ``hub``; ``limits`` override its inbox's (tests/helpers/nodes.py's LIMITS)."""
    config = node_config(loop=ROUNDS, generation=SMALL)
    return build_node(config, lambda fingerprint: MemoryTransport(hub, config.swarm.run_id, peer_id, fingerprint,
                                                                  replace(LIMITS, **limits), clock=clock))


def publish_round(peer, round_: int) -> None:
    """The (async) peer publishes its batch of ``round_``."""
    peer.round = round_
    peer.run_round()


def test_a_batch_numbered_far_ahead_is_never_fetched():
    # An honest peer in step with the node; Mallory numbers each of its batches a thousand rounds ahead. Held until
    # the node reached that round, each would be memory nobody is charged for: it is not fetched at all.
    hub = MemoryHub()
    honest, mallory = make_node(hub, "honest", generation=SMALL), make_node(hub, "mallory", generation=SMALL)
    node = rounds_node(hub)
    for _ in range(3):
        publish_round(honest, node.round)
        publish_round(mallory, node.round + 1000)
        report = node.run_round()
        assert report.late_peers == 0 and report.waited_seconds < DEADLINE / 2  # nothing of the round to wait for
        assert report.peer_groups_received == 1  # the honest peer's
    assert node.round == 3
    assert node.transport.stats().delivered_batches == 3  # the honest peer's three: none of Mallory's


def test_a_batch_of_a_later_round_stays_charged_to_its_peer_until_the_node_reaches_that_round():
    # Quota 2: Mallory's batches of rounds 2 and 3 are fetched at round 0 and held; they fill its quota until the
    # node trains on them, so its batch of round 4 waits for room. (The honest peer keeps the node where it is.)
    hub = MemoryHub()
    honest, mallory = make_node(hub, "honest", generation=SMALL), make_node(hub, "mallory", generation=SMALL)
    node = rounds_node(hub, per_peer_quota=2)
    for round_ in (2, 3, 4):
        publish_round(mallory, round_)
    received = []
    for round_ in range(5):
        publish_round(honest, round_)
        report = node.run_round()
        assert report.waited_seconds < DEADLINE / 2
        received.append(report.peer_groups_received)
        if round_ == 1:  # Mallory's round 2 and 3 still held: its round 4 is not fetched yet
            assert node.transport.stats().delivered_batches == 4  # honest 0 and 1, Mallory 2 and 3
    assert node.round == 5
    assert received == [1, 1, 2, 2, 2]  # each of Mallory's batches trained on in its round
    assert node.transport.stats().rejections[("mallory", PEER_QUOTA)] == 1


def test_a_batch_held_for_a_later_round_is_dropped_once_stale():
    hub = MemoryHub()
    honest = make_node(hub, "honest", generation=SMALL)
    clock = ShiftedClock(time.time)
    node = rounds_node(hub, clock=clock)
    mallory = MemoryTransport(hub, node.config.swarm.run_id, "mallory", node.policy.fingerprint, LIMITS)
    mallory.publish(make_batch("mallory", 2, time.time() - LIMITS.max_age_s + 5, run_id=node.config.swarm.run_id,
                               tokenizer=node.policy.fingerprint))  # fresh for 5 more seconds
    publish_round(honest, 0)
    node.run_round()  # round 0: Mallory's batch of round 2 is fetched and held
    assert node.transport.stats().delivered_batches == 2
    clock.advance(6)  # it is older than max_age_s now: dropped, its charge freed, never trained on
    for round_ in (1, 2):
        publish_round(honest, round_)
        node.run_round()
    assert node.transport.stats().rejections[("mallory", STALE)] == 1
    assert node.transport.scores()["mallory"].bad == 0  # its age is no fault of the peer's


def test_a_running_node_is_not_dragged_far_by_its_only_peers_claim():
    # In step with Mallory for two rounds, then Mallory's batch says round 2**40 - 1. A joining node would take the
    # swarm's round from one peer; a running one jumps further than loop.rounds_ahead only with two peers there,
    # and otherwise moves to the window's end: rounds_ahead rounds a round at most.
    hub = MemoryHub()
    mallory = make_node(hub, "mallory", generation=SMALL)
    node = rounds_node(hub)
    for _ in range(2):
        publish_round(mallory, node.round)
        node.run_round()
    publish_round(mallory, MAX_ROUND)
    report = node.run_round()  # round 2
    assert node.round == 2 + WINDOW
    assert report.waited_seconds < DEADLINE / 2  # a peer that says it is far ahead is not waited for
    node.run_round()
    assert node.round == 2 + 2 * WINDOW and node.transport.stats().published_batches == 4


def test_a_running_node_behind_its_only_peer_catches_up_a_window_at_a_time():
    # The node stalled (a long evaluation, say) while its one peer ran on 20 rounds: the node cannot take its round
    # from one peer at once, but reaches it rounds_ahead rounds at a time, and trains on its batch there.
    hub = MemoryHub()
    peer = make_node(hub, "peer", generation=SMALL)
    node = rounds_node(hub)
    assert node.config.loop.rounds_ahead == WINDOW
    for _ in range(2):
        publish_round(peer, node.round)
        node.run_round()
    publish_round(peer, 22)
    rounds = []
    while node.round < 22:
        report = node.run_round()
        assert report.waited_seconds < DEADLINE / 2
        rounds.append(node.round)
    assert rounds == [*range(2 + WINDOW, 22, WINDOW), 22]  # the last step: the batch of 22 is within the window
    assert node.run_round().peer_groups_received == 1  # round 22: the peer's batch of it


def test_a_running_node_follows_two_peers_that_are_far_ahead():
    hub = MemoryHub()
    peers = [make_node(hub, f"peer{k}", generation=SMALL) for k in range(2)]
    node = rounds_node(hub)
    for _ in range(2):
        for peer in peers:
            publish_round(peer, node.round)
        node.run_round()
    for peer in peers:  # the swarm restarted from a later checkpoint, say
        publish_round(peer, 500)
    node.run_round()
    assert node.round == 500


def test_a_peer_that_delivers_one_round_in_three_is_muted_and_no_longer_waited_for():
    hub = MemoryHub()
    mallory = make_node(hub, "mallory", generation=SMALL)
    node = rounds_node(hub)
    waits = []
    for k in range(9):
        if k % 3 == 0:
            publish_round(mallory, node.round)
        waits.append(node.run_round().waited_seconds)
    assert node.transport.scores()["mallory"].muted_until is not None
    assert all(wait >= DEADLINE for wait in waits[1:3]), waits  # rounds 1 and 2 missed: a deadline each
    assert all(wait < DEADLINE / 2 for wait in waits[3:]), waits  # muted: never waited for again
