"""A round with the run loop's helper threads (``runner/helper_threads.py``: publishing and decoding peers' batches
off the round's thread) trains on the same groups, in the same order, with the same results, as a round
without them; a failed publish still stops the round with its error."""

import math

import pytest
from helpers.nodes import make_node

from ftis.node.intake.scoring import decode_groups, score_batch
from ftis.node.records.utilisation import Stopwatch
from ftis.node.runner.helper_threads import HelperThreads
from ftis.node.swarm.memory import MemoryHub
from ftis.protocol import decode, encode


def run_pair(helpers: HelperThreads | None, rounds: int = 3) -> list[tuple]:
    hub = MemoryHub()
    nodes = [make_node(hub, "small", "tiny-small", "full", seed=1), make_node(hub, "medium", "tiny-medium", seed=2)]
    try:
        reports = [node.run_round(helpers=helpers) for _ in range(rounds) for node in nodes]
    finally:
        if helpers is not None:
            helpers.close()
        for node in nodes:
            node.transport.close()
    return [(r.round, r.own_reward, None if math.isnan(r.peer_reward) else r.peer_reward, r.own_groups,
             r.peer_groups_received, r.peer_groups_used, r.peer_groups_by_peer, r.unusable_groups,
             r.generation_tokens, r.step.loss, r.step.groups, r.step.tokens, r.transport.published_batches,
             r.transport.published_bytes, r.transport.delivered_batches)
            for r in reports]


class CountingHelperThreads(HelperThreads):
    def __init__(self) -> None:
        super().__init__()
        self.decoded_ahead = 0

    def decode_ahead(self, received, tokenizer, vocab_size):
        self.decoded_ahead += len(received)
        return super().decode_ahead(received, tokenizer, vocab_size)


def test_a_round_with_helper_threads_matches_one_without():
    helpers = CountingHelperThreads()
    plain, threaded = run_pair(None), run_pair(helpers)
    assert sum(r[4] for r in plain) > 0 and any(r[2] is not None for r in plain)  # peers' groups were scored
    assert helpers.decoded_ahead >= 4  # the peer's batch of the round before, each round but the first node's first
    assert threaded == plain


def test_texts_decoded_ahead_score_like_texts_decoded_in_place():
    node = make_node(MemoryHub(), "self", generation={"prompts_per_round": 4})
    try:
        batch = decode(encode(node._generate(Stopwatch(), None).batch))  # as a peer receives it
    finally:
        node.transport.close()
    texts = decode_groups(batch, node.policy.tokenizer, vocab_size=10**6)
    ahead = score_batch(batch, node.task, node.policy.tokenizer, trust_peer_answers=False, off_policy=True,
                        texts=texts)
    here = score_batch(batch, node.task, node.policy.tokenizer, trust_peer_answers=False, off_policy=True)
    assert ahead.rewards == here.rewards and len(ahead.groups) == len(here.groups) == 4
    assert decode_groups(batch, node.policy.tokenizer, vocab_size=2) == [None] * 4  # outside the vocabulary


def test_a_failed_publish_stops_the_round_with_its_error():
    node = make_node(MemoryHub(), "self")

    def refuse(batch):
        raise ValueError(f"round {batch.round} is not above the last one published")

    node.transport.publish = refuse
    helpers = HelperThreads()
    try:
        with pytest.raises(ValueError, match="not above the last one"):
            node.run_round(helpers=helpers)
    finally:
        helpers.close()  # raised once already: close does not raise it again
        node.transport.close()
