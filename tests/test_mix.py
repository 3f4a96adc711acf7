"""The peer-group mix: at most the limit, fair across peers, freshest first."""

import numpy as np

from ftis.node.trainer.groups import TrainingGroup
from ftis.node.trainer.mix import Candidate, select_peer_groups
from ftis.protocol.schema import CompletionColumns

COLUMNS = CompletionColumns(np.array([1]), np.array([-0.1], np.float32), np.array([1]), np.zeros(1), ("stop",))


def candidate(peer: str, created_at: float) -> Candidate:
    group = TrainingGroup(f"{peer}-{created_at}", peer, np.array([1]), COLUMNS, np.array([1.0]), True, 1.0)
    return Candidate(group, created_at)


def names(chosen: list[Candidate]) -> list[str]:
    return [c.group.group_id for c in chosen]


def test_peers_take_turns_freshest_first():
    chatty = [candidate("a", t) for t in (1.0, 2.0, 3.0, 4.0)]
    quiet = [candidate("b", 2.5), candidate("c", 0.5)]
    chosen = select_peer_groups([*chatty, *quiet], limit=4)
    # a has the freshest group (4.0) so it goes first; then b, then c, then a again
    assert names(chosen) == ["a-4.0", "b-2.5", "c-0.5", "a-3.0"]


def test_limit_and_fewer_candidates():
    candidates = [candidate("a", 1.0), candidate("b", 2.0)]
    assert names(select_peer_groups(candidates, limit=1)) == ["b-2.0"]
    assert len(select_peer_groups(candidates, limit=10)) == 2
    assert select_peer_groups([], limit=3) == []
    assert select_peer_groups(candidates, limit=0) == []
