"""A node's own groups are scored once, while their batch is built (``score_own_batch``): the result equals
scoring the batch as any received batch (``score_batch``, trusting its own answers), group for group."""

import numpy as np
import pytest
from helpers.nodes import make_node

from ftis.node.records.utilisation import Stopwatch
from ftis.node.swarm.memory import MemoryHub
from ftis.node.trainer.wire_groups import score_batch, score_own_batch


@pytest.mark.parametrize("filter_local", [False, True])
def test_the_rewards_computed_while_building_equal_a_recomputation(filter_local):
    node = make_node(MemoryHub(), "self", generation={"prompts_per_round": 4}, loss={"filter_local": filter_local})
    try:
        own = node._generate(Stopwatch(), None)
        reused = score_own_batch(own.batch, own.rewards, off_policy=filter_local)
        again = score_batch(own.batch, node.task, node.policy.tokenizer, trust_peer_answers=True,
                            off_policy=filter_local)
    finally:
        node.transport.close()
    assert set(again.rewards) == {0.0, 1.0}  # both outcomes occur, so a mix-up would show
    assert reused.rewards == again.rewards and reused.unusable == again.unusable == 0
    assert len(reused.groups) == len(again.groups) == 4
    for mine, theirs in zip(reused.groups, again.groups, strict=True):
        assert mine.rewards.dtype == theirs.rewards.dtype and np.array_equal(mine.rewards, theirs.rewards)
        assert mine.completions is theirs.completions and mine.prompt_ids is theirs.prompt_ids
        assert (mine.group_id, mine.peer_id, mine.off_policy, mine.temperature, mine.task) == (
            theirs.group_id, theirs.peer_id, theirs.off_policy, theirs.temperature, theirs.task)


def test_a_reward_list_per_group_is_required():
    node = make_node(MemoryHub(), "self")
    try:
        own = node._generate(Stopwatch(), None)
    finally:
        node.transport.close()
    with pytest.raises(ValueError, match="reward lists"):
        score_own_batch(own.batch, own.rewards[:-1], off_policy=False)
