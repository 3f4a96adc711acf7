"""Lockstep stepping: every node of a swarm trains, each round, on exactly its peers' batches of that round,
without waiting out a deadline; a failing node fails the round instead of hanging its peers."""

import threading

import pytest
from helpers.nodes import DigitTask

from ftis.node.config import NodeConfig
from ftis.node.experiment.lockstep import LockstepSwarm, in_parallel, step_round
from ftis.node.generation import make_generator
from ftis.node.models import load_policy
from ftis.node.runner.node import Node


def lockstep_node(swarm: LockstepSwarm, peer_id: str, prompts: int, seed: int) -> Node:
    config = NodeConfig.model_validate({
        "model": {"name": "tiny-small", "seed": seed},
        "generation": {"prompts_per_round": prompts, "group_size": 4, "max_new_tokens": 4, "temperature": 1.5},
        "trainer": {"learning_rate": 1e-3},
        "loss": {"divergence_threshold": 1e9},
        "loop": {"mode": "rounds", "round_deadline_s": 20.0},
        "swarm": {"run_id": "lockstep"},
    })
    policy = load_policy("tiny-small", seed=seed)
    generator = make_generator(config.generation.backend, policy, config.generation, seed=seed)
    return Node(config, policy, DigitTask(), generator, swarm.transport(peer_id, policy.fingerprint))


def test_each_node_trains_on_its_peers_batch_of_the_same_round():
    from ftis.node.config import SwarmConfig

    swarm = LockstepSwarm(3, SwarmConfig(run_id="lockstep"))
    nodes = [lockstep_node(swarm, f"n{k}", prompts=k + 1, seed=k) for k in range(3)]
    for round_ in range(3):
        reports = step_round(nodes, [swarm.barrier])
        for k, report in enumerate(reports):
            assert report.round == round_
            # the two peers' batches of this round: 1 + 2 + 3 prompts in all, less this node's own
            assert report.peer_groups_received == 6 - (k + 1)
            assert report.late_peers == 0 and report.waited_seconds < 5.0  # nothing left to wait for
    assert all(node.round == 3 for node in nodes)


def test_a_failing_call_breaks_the_barrier_and_its_error_is_raised():
    barrier = threading.Barrier(2, timeout=30)

    def fail() -> None:
        raise ValueError("node n1 broke")

    with pytest.raises(ValueError, match="node n1 broke"):
        in_parallel([barrier.wait, fail], [barrier])
    assert barrier.broken


def test_results_come_back_in_order():
    assert in_parallel([lambda: 1, lambda: 2, lambda: 3]) == [1, 2, 3]
