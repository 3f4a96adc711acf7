"""Two tiny nodes in rounds mode with horizontal grouping, each in its own thread over the in-memory
transport: every round both answer the same shared prompts, each merges its own completions with the
other's into one advantage group per prompt, trains on those, and its weights change."""

from concurrent.futures import ThreadPoolExecutor

import torch
from helpers.nodes import make_node

from ftis.node.swarm.memory import MemoryHub

ROUNDS, PROMPTS, SHARE = 3, 2, 4


def test_two_nodes_train_on_merged_groups_of_shared_prompts():
    hub = MemoryHub()
    settings = {
        "loop": {"mode": "rounds", "grouping": "horizontal", "swarm_seed": 5, "round_deadline_s": 60.0,
                 "min_peers": 1},  # round 0 waits for the other node too
        "generation": {"prompts_per_round": PROMPTS, "group_size": SHARE, "max_new_tokens": 4},
    }
    nodes = [make_node(hub, "small", "tiny-small", "full", seed=1, **settings),
             make_node(hub, "medium", "tiny-medium", "lora", seed=2, **settings)]
    before = [[p.detach().clone() for p in node.trainer.parameters] for node in nodes]
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(lambda n=node: [n.run_round() for _ in range(ROUNDS)]) for node in nodes]
        reports = [future.result(timeout=300) for future in futures]
    for node, rounds, weights in zip(nodes, reports, before, strict=True):
        assert [r.round for r in rounds] == list(range(ROUNDS)) and node.round == ROUNDS
        for r in rounds:
            assert r.late_peers == 0 and r.peer_groups_used == PROMPTS
            # each shared prompt: this node's share and the other's, one advantage group of 2 × SHARE
            assert r.merged_groups == PROMPTS and r.merged_group_size == 2 * SHARE and r.mismatched_groups == 0
            assert r.step.groups + r.step.zero_variance_groups == PROMPTS  # advantage groups, not 2 × PROMPTS
            if r.step.trained:
                assert r.step.sequences == r.step.groups * 2 * SHARE and r.step.peer_groups == r.step.groups
        assert any(r.step.trained for r in rounds)
        assert node.trainer.policy_version == sum(r.step.trained for r in rounds)
        assert any(not torch.equal(a, b) for a, b in zip(weights, node.trainer.parameters, strict=True))
