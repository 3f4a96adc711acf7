"""A node's own groups are made once, in trainer form, while their batch is built (``Node._generate``): they
equal scoring its batch as any received batch (``score_batch``, trusting its own answers), group for group,
with the sampler's log-probs as it computed them (the wire carries them rounded to float16), and the rewards the
published batch carries are the ones the node trains on."""

import numpy as np
import pytest
from helpers.nodes import make_node

from ftis.node.intake.scoring import score_batch
from ftis.node.records.utilisation import Stopwatch
from ftis.node.swarm.memory import MemoryHub
from ftis.protocol import decode, encode


@pytest.mark.parametrize("filter_local", [False, True])
def test_the_own_groups_equal_the_published_batch_scored_again(filter_local):
    node = make_node(MemoryHub(), "self", generation={"prompts_per_round": 4}, loss={"filter_local": filter_local})
    try:
        watch = Stopwatch()
        own = node._generate(watch, None)
        published = decode(encode(own.batch))  # as a peer receives it
        again = score_batch(own.batch, node.task, node.policy.tokenizer, trust_peer_answers=True,
                            off_policy=filter_local)
    finally:
        node.transport.close()
    assert set(again.rewards) == {0.0, 1.0}  # both outcomes occur, so a mix-up would show
    assert own.rewards == again.rewards and again.unusable == 0
    assert len(own.groups) == len(again.groups) == 4
    for mine, theirs, wire in zip(own.groups, again.groups, published.groups, strict=True):
        assert mine.rewards.dtype == theirs.rewards.dtype and np.array_equal(mine.rewards, theirs.rewards)
        assert np.array_equal(mine.prompt_ids, theirs.prompt_ids)
        for name in ("token_ids", "sampler_logprobs", "lengths"):
            assert np.array_equal(getattr(mine.completions, name), getattr(theirs.completions, name)), name
        assert (mine.group_id, mine.peer_id, mine.off_policy, mine.temperature, mine.task) == (
            theirs.group_id, theirs.peer_id, theirs.off_policy, theirs.temperature, theirs.task)
        assert not mine.per_sequence and mine.advantage_key is None
        assert [c.reward for c in wire.completions] == mine.rewards.tolist()  # the advisory rewards sent
    assert {"generate", "score_own", "build"} <= watch.seconds.keys()
