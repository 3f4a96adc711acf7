"""The loop's two modes over the in-memory transport: ``async`` never waits; ``rounds`` waits up to its
deadline for each live peer's batch of the round, counts the peers that missed it, and falls into
step with peers that are ahead."""

from node_helpers import make_node

from ftis.node.swarm.memory import MemoryHub

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


def test_rounds_mode_counts_an_early_batch_and_jumps_to_a_peer_that_is_ahead():
    hub = MemoryHub()
    peer = make_node(hub, "peer", generation={"prompts_per_round": 1, "group_size": 4, "max_new_tokens": 3})
    node = rounds_node(hub, "node")
    peer.round = 7  # the peer has been running for a while
    peer.run_round()
    report = node.run_round()
    assert report.late_peers == 0 and report.waited_seconds < DEADLINE / 2
    assert report.peer_groups_received == 0  # the peer's round-7 batch is held for round 7
    assert node.round == 7  # the next batch it publishes is round 7, the swarm's
    report = node.run_round()  # the peer's seq-7 batch counts for round 7: no wait, and it is trained on now
    assert report.late_peers == 0 and report.waited_seconds < DEADLINE / 2
    assert report.peer_groups_received == 1
    assert node.round == 8


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
