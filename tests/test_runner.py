"""Two tiny-model nodes of different sizes, one of them LoRA, train together over the in-memory
transport: each receives and scores the other's groups, trains on them, and its weights change."""

import numpy as np
import pytest
import torch
from helpers.nodes import LIMITS, make_node

from ftis.node.config import NodeConfig
from ftis.node.swarm.memory import MemoryHub, MemoryTransport


def test_two_heterogeneous_nodes_train_on_each_others_groups():
    hub = MemoryHub()
    small = make_node(hub, "small", "tiny-small", "full", seed=1)
    medium = make_node(hub, "medium", "tiny-medium", "lora", seed=2)
    assert small.policy.fingerprint == medium.policy.fingerprint  # one tokenizer, two sizes
    before = {id(node): [p.detach().clone() for p in node.trainer.parameters] for node in (small, medium)}
    reports = {id(small): [], id(medium): []}
    for _ in range(3):
        for node in (small, medium):
            reports[id(node)].append(node.run_round())
    for node, other in ((small, "medium"), (medium, "small")):
        rounds = reports[id(node)]
        assert sum(r.peer_groups_received for r in rounds) > 0
        assert any(r.peer_groups_by_peer.get(other, 0) > 0 for r in rounds)
        assert any(r.step.trained for r in rounds)
        assert node.trainer.policy_version == sum(r.step.trained for r in rounds)
        assert node.generator.policy_version == node.trainer.policy_version
        assert rounds[-1].transport.delivered_batches >= 2
        assert all(0.0 <= r.own_reward <= 1.0 for r in rounds)
        assert rounds[-1].generation_tokens > 0
        changed = [not torch.equal(a, b) for a, b in zip(before[id(node)], node.trainer.parameters, strict=True)]
        assert any(changed)
    # the LoRA node trains only its adapter
    assert all("lora_" in name for name, p in medium.policy.model.named_parameters() if p.requires_grad)
    assert np.isfinite([r.step.loss for rs in reports.values() for r in rs]).all()


def test_join_builds_a_node_from_config_and_writes_metrics(tmp_path):
    import json

    from ftis.node.runner.join import build_node, run_node

    config = NodeConfig.model_validate({
        "model": {"name": "tiny-small"},
        "task": {"name": "arithmetic"},
        "generation": {"prompts_per_round": 2, "group_size": 3, "max_new_tokens": 4},
    })
    hub = MemoryHub()
    node = build_node(config, lambda fingerprint: MemoryTransport(hub, "ftis-demo", "solo", fingerprint, LIMITS))
    lines: list[str] = []
    run_node(node, rounds=2, out=tmp_path, echo=lines.append)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [0, 1]
    assert records[0]["own_groups"] == 2 and records[0]["peer_reward"] is None  # no peer: null, not NaN
    assert records[0]["bytes_sent"] > 0 and "train_is_weight_mean" in records[0]
    assert lines[0].startswith("node solo (tiny-small, full)") and lines[1].startswith("round     0")
    with pytest.raises(RuntimeError, match="closed"):
        node.transport.receive()  # run_node always closes the transport


def test_nodes_sharing_a_seed_answer_their_own_prompts_and_a_peer_id_reproduces_its_own():
    """Every node that keeps the default seed would otherwise draw the same problems each round: the node's
    generator takes its peer id in, so two peers differ and the same peer id with the same seed repeats."""
    def first_problems(peer_id: str) -> list[int]:
        node = make_node(MemoryHub(), peer_id, "tiny-small", "lora", seed=0)
        return [p.index for p in node.intake.grouping.problems(0)]

    alice, bob, alice_again = first_problems("alice"), first_problems("bob"), first_problems("alice")
    assert alice == alice_again
    assert len(set(alice) & set(bob)) == 0
