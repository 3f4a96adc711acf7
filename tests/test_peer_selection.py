"""The peer-group mix: at most the limit, fair across peers, freshest first."""

import numpy as np

from ftis.node.intake.peer_selection import DatedGroup, select_peer_groups
from ftis.node.trainer.groups import TrainingGroup
from ftis.protocol.schema import CompletionColumns

COLUMNS = CompletionColumns(np.array([1, 2]), np.array([-0.1, -0.2], np.float32), np.array([1, 1]), np.zeros(2),
                            ("stop", "stop"))


def dated(peer: str, created_at: float, rewards: tuple[float, float] = (1.0, 0.0)) -> DatedGroup:
    group = TrainingGroup(f"{peer}-{created_at}", peer, np.array([1]), COLUMNS, np.array(rewards), True, 1.0)
    return DatedGroup(group, created_at)


def names(chosen: list[DatedGroup]) -> list[str]:
    return [c.group.group_id for c in chosen]


def test_peers_take_turns_freshest_first():
    chatty = [dated("a", t) for t in (1.0, 2.0, 3.0, 4.0)]
    quiet = [dated("b", 2.5), dated("c", 0.5)]
    chosen = select_peer_groups([*chatty, *quiet], limit=4)
    # a has the freshest group (4.0) so it goes first; then b, then c, then a again
    assert names(chosen) == ["a-4.0", "b-2.5", "c-0.5", "a-3.0"]


def test_limit_and_fewer_candidates():
    groups = [dated("a", 1.0), dated("b", 2.0)]
    assert names(select_peer_groups(groups, limit=1)) == ["b-2.0"]
    assert len(select_peer_groups(groups, limit=10)) == 2
    assert select_peer_groups([], limit=3) == []
    assert select_peer_groups(groups, limit=0) == []


def test_groups_without_reward_variance_take_no_place():
    # Four fresh groups that teach nothing (all correct) and four older ones that do: with room for four, the
    # informative ones are chosen, however fresh the others are.
    flat = [dated("a", 10.0 + t, rewards=(1.0, 1.0)) for t in range(4)]
    informative = [dated("a", float(t)) for t in range(4)]
    assert names(select_peer_groups([*flat, *informative], limit=4)) == ["a-3.0", "a-2.0", "a-1.0", "a-0.0"]
    # In horizontal grouping a group is judged with the other nodes' groups of its prompt: all stay groups.
    assert names(select_peer_groups([*flat, *informative], limit=4, vertical=False)) == [
        "a-13.0", "a-12.0", "a-11.0", "a-10.0"]


def test_one_peer_gives_at_most_its_share_of_the_limit():
    alone = [dated("a", float(t)) for t in range(8)]
    assert names(select_peer_groups(alone, limit=4, share=0.5)) == ["a-7.0", "a-6.0"]
    assert len(select_peer_groups(alone, limit=5, share=0.5)) == 3  # rounded up
    both = [*alone, dated("b", 0.5)]
    assert names(select_peer_groups(both, limit=4, share=0.5)) == ["a-7.0", "b-0.5", "a-6.0"]


def test_the_mix_is_bounded_in_completions_in_all_and_per_peer():
    # A peer sampling 64 completions a prompt: its group would be 8 of the node's. With room for 8 completions in
    # all and half of them per peer, its large group is passed over and the others fill the room fairly.
    big = TrainingGroup("a-big", "a", np.array([1]), CompletionColumns(
        np.arange(64) % 5, np.full(64, -0.1, np.float32), np.ones(64, np.int64), np.zeros(64), ("stop",) * 64),
        np.array([1.0, 0.0] * 32), True, 1.0)
    candidates = [DatedGroup(big, 9.0), *(dated("a", t) for t in (1.0, 2.0, 3.0)),
                  *(dated("b", t) for t in (1.5, 2.5, 3.5))]
    chosen = select_peer_groups(candidates, limit=32, share=0.5, max_completions=8)
    assert "a-big" not in names(chosen)
    assert sum(c.group.size for c in chosen) <= 8
    assert sum(c.group.size for c in chosen if c.group.peer_id == "a") <= 4
    assert sorted(names(chosen)) == ["a-2.0", "a-3.0", "b-2.5", "b-3.5"]
