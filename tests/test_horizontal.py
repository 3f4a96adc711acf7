"""Horizontal grouping (docs/loss.md), piece by piece: the round's shared prompts agree across nodes, a shared
prompt's groups from several nodes form one advantage group (checked against a per-token loop over the
union), a group that claims a shared id for another prompt is kept apart and counted, packing and
micro-batching keep an advantage group whole, and the config refuses horizontal grouping outside
rounds mode."""

import math

import numpy as np
import pytest
import torch
from helpers.nodes import DigitTask, make_node
from transformers import LlamaConfig, LlamaForCausalLM

from ftis.node.config import ConfigError, LoopConfig, LossConfig, NodeConfig, TrainerConfig, load_config
from ftis.node.intake.shared_groups import merge_shared
from ftis.node.intake.shared_prompts import shared_group_id, shared_problems
from ftis.node.loss import LossInputs, LossParams, compute_loss
from ftis.node.swarm.memory import MemoryHub
from ftis.node.trainer.groups import TrainingGroup, advantage_groups, advantage_index
from ftis.node.trainer.packing import micro_batches, pack, padded_tokens
from ftis.node.trainer.trainer import Trainer
from ftis.protocol import TaskRef
from ftis.protocol.schema import CompletionColumns

PROMPT = np.array([5, 6, 7])
TASK = TaskRef("digits", "train", 3, "3")


def group(rng: np.random.Generator, rewards: list[float], *, peer: str, off_policy: bool,
          group_id: str = "run/0/0", task: TaskRef = TASK, prompt: np.ndarray = PROMPT) -> TrainingGroup:
    lengths = rng.integers(1, 5, size=len(rewards))
    columns = CompletionColumns(
        token_ids=rng.integers(1, 30, size=int(lengths.sum())),
        sampler_logprobs=-rng.exponential(1.0, size=int(lengths.sum())).astype(np.float32),
        lengths=lengths.astype(np.int64),
        rewards=np.zeros(len(rewards)),
        finish_reasons=tuple("stop" for _ in rewards),
    )
    return TrainingGroup(group_id, peer, prompt, columns, np.array(rewards, float), off_policy, 1.0, task)


# --- the merged advantage, against a per-token loop over the union -------------------------------------------


def naive_ftis_at_first_step(rewards: list[float], off_policy: list[bool], old: list[list[float]],
                             sampler: list[list[float]], params: LossParams) -> float:
    """L = −(1/N) Σ_i (1/|a_i|) Σ_t w_t · Â_i · keep_i for ONE advantage group (all of ``rewards``), at the
    first step on a batch (π_θ = π_θold, so R_t = 1 and s_t = Â_i)."""
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))
    total = 0.0
    for i, reward in enumerate(rewards):
        advantage = (reward - mean) / (std + 1e-6)
        divergence = sum(math.exp(s - o) - (s - o) - 1 for s, o in zip(sampler[i], old[i], strict=True))
        divergence /= len(old[i])
        if off_policy[i] and (advantage <= 0 or divergence > params.divergence_threshold):
            continue  # filtered: keep_i = 0, but it stayed in the mean and std above and stays in N below
        weights = [min(math.exp(o - s), params.clip_c) for o, s in zip(old[i], sampler[i], strict=True)]
        total += sum(w * advantage for w in weights) / len(weights)
    return -total / len(rewards)


def test_the_merged_advantage_is_over_the_union_own_on_policy_and_peers_filtered():
    rng = np.random.default_rng(0)
    own = group(rng, [1.0, 1.0, 1.0], peer="me", off_policy=False)  # alone: all equal, it would teach nothing
    peer_a = group(rng, [0.0, 1.0, 0.0], peer="a", off_policy=True)
    peer_b = group(rng, [1.0, 0.0, 0.0], peer="b", off_policy=True)
    merged = merge_shared([own, peer_a, peer_b])
    assert merged.merged == 1 and merged.sizes == [9] and merged.mismatched == 0
    packed = pack(merged.groups)
    assert packed.group_index.tolist() == [0] * 9
    assert packed.off_policy.tolist() == [False] * 3 + [True] * 6  # per sequence: own on-policy, peers' off

    old = torch.where(packed.loss_mask, -torch.rand(packed.loss_mask.shape, generator=torch.Generator().manual_seed(1)),
                      0.0)
    params = LossParams(divergence_threshold=0.3)
    inputs = LossInputs(logprobs=old.clone(), old_logprobs=old, sampler_logprobs=packed.sampler_logprobs,
                        loss_mask=packed.loss_mask, rewards=packed.rewards, group_ids=packed.group_index,
                        off_policy=packed.off_policy)
    got = compute_loss("ftis", inputs, params)

    rows = [[t for t in range(packed.loss_mask.shape[1]) if packed.loss_mask[i, t]] for i in range(9)]
    expected = naive_ftis_at_first_step(
        rewards=[1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0],
        off_policy=[False] * 3 + [True] * 6,
        old=[[float(old[i, t]) for t in row] for i, row in enumerate(rows)],
        sampler=[[float(packed.sampler_logprobs[i, t]) for t in row] for i, row in enumerate(rows)],
        params=params,
    )
    assert float(got.loss) == pytest.approx(expected, rel=1e-5, abs=1e-7)
    assert int(got.figures.num_sequences) == 9 and int(got.figures.zero_variance_groups) == 0
    assert float(got.figures.filtered_advantage_fraction) == pytest.approx(4 / 9)  # the peers' four zeros

    vertical = pack([own, peer_a, peer_b])  # without the merge: three groups, the own one skipped
    assert vertical.group_index.tolist() == [0] * 3 + [1] * 3 + [2] * 3


def test_a_group_claiming_a_shared_id_for_another_prompt_is_kept_apart_and_counted():
    rng = np.random.default_rng(2)
    own = group(rng, [1.0, 0.0], peer="me", off_policy=False)
    same = group(rng, [0.0, 1.0], peer="a", off_policy=True)
    other_prompt = group(rng, [1.0, 0.0], peer="b", off_policy=True, prompt=np.array([5, 6, 8]))
    shorter_prompt = group(rng, [1.0, 0.0], peer="c", off_policy=True, prompt=PROMPT[:2])
    other_problem = group(rng, [1.0, 0.0], peer="d", off_policy=True, task=TaskRef("digits", "train", 4, "4"))
    alone = group(rng, [1.0, 0.0], peer="e", off_policy=True, group_id="run/0/1")
    merged = merge_shared([own, same, other_prompt, shorter_prompt, other_problem, alone])
    assert merged.mismatched == 3 and merged.merged == 1 and merged.sizes == [4]
    assert [g.advantage_key for g in merged.groups] == ["run/0/0", "run/0/0", None, None, None, None]
    assert advantage_index(merged.groups) == [0, 0, 1, 2, 3, 4]
    assert [g.peer_id for g in merged.groups] == ["me", "a", "b", "c", "d", "e"]  # nothing lost or reordered


def test_the_first_group_with_an_id_is_the_reference():
    rng = np.random.default_rng(3)
    own = group(rng, [1.0, 0.0], peer="me", off_policy=False, prompt=np.array([9, 9]))
    peers = [group(rng, [1.0, 0.0], peer=p, off_policy=True) for p in ("a", "b")]
    merged = merge_shared([own, *peers])  # the peers agree with each other, not with this node
    assert merged.mismatched == 2 and merged.merged == 0
    assert all(g.advantage_key is None for g in merged.groups)


def test_micro_batches_keep_an_advantage_group_whole():
    rng = np.random.default_rng(4)
    first = group(rng, [1.0, 0.0], peer="me", off_policy=False, group_id="run/0/0")
    second = group(rng, [1.0, 0.0], peer="me", off_policy=False, group_id="run/0/1")
    later = [group(rng, [0.0, 1.0], peer="a", off_policy=True, group_id=gid) for gid in ("run/0/0", "run/0/1")]
    merged = merge_shared([first, second, *later])
    # room for the larger advantage group, not for both: each alone, and whole
    gathered = advantage_groups(merged.groups)
    room = max(padded_tokens(together) for together in gathered)
    chunks = [micro.groups for micro in micro_batches(gathered, max_tokens=room)]
    assert chunks == [[merged.groups[0], merged.groups[2]], [merged.groups[1], merged.groups[3]]]
    assert pack(merged.groups).group_index.tolist() == [0, 0, 1, 1, 0, 0, 1, 1]


def test_micro_batching_a_merged_group_does_not_change_the_gradient():
    def gradients(max_tokens: int) -> tuple[list[torch.Tensor], object]:
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=1))
        trainer = Trainer(model, "full", LossConfig(divergence_threshold=1e9),
                          TrainerConfig(max_tokens_per_microbatch=max_tokens))
        grads = []
        step = trainer.optimizer.step
        trainer.optimizer.step = lambda: (grads.extend(p.grad.clone() for p in trainer.parameters), step())
        rng = np.random.default_rng(5)
        groups = [group(rng, [1.0, 1.0], peer="me", off_policy=False, group_id=f"run/0/{k}") for k in range(2)]
        groups += [group(rng, [0.0, 1.0, 0.0], peer="a", off_policy=True, group_id=f"run/0/{k}") for k in range(2)]
        metrics = trainer.step(merge_shared(groups).groups)
        return grads, metrics

    whole, metrics = gradients(10_000)
    split, _ = gradients(1)
    # two advantage groups of five; alone, the own groups (all 1.0) would have been skipped
    assert metrics.groups == 2 and metrics.zero_variance_groups == 0 and metrics.sequences == 10
    assert metrics.peer_groups == 2
    for a, b in zip(whole, split, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)


# --- the runner's side: shared prompts, their ids ----------------------------------------------------------


class FiniteTask(DigitTask):
    def size(self, split: str) -> int | None:
        return 50


@pytest.mark.parametrize("task", [DigitTask(), FiniteTask()], ids=["synthetic", "finite"])
def test_shared_problems_depend_on_the_seed_and_round_only(task):
    round0 = shared_problems(task, "train", 4, swarm_seed=7, round_=0)
    assert round0 == shared_problems(task, "train", 4, swarm_seed=7, round_=0)
    assert round0[:2] == shared_problems(task, "train", 2, swarm_seed=7, round_=0)  # any prompts_per_round
    assert round0 != shared_problems(task, "train", 4, swarm_seed=7, round_=1)
    assert round0 != shared_problems(task, "train", 4, swarm_seed=8, round_=0)
    if task.size("train") is not None:
        assert all(0 <= p.index < 50 for p in round0)


def test_two_nodes_with_one_swarm_seed_draw_the_same_problems_each_round():
    hub = MemoryHub()
    horizontal = {"mode": "rounds", "grouping": "horizontal", "swarm_seed": 11}
    a = make_node(hub, "a", seed=1, loop=horizontal)
    b = make_node(hub, "b", seed=2, loop=horizontal)
    rounds = []
    for round_ in (0, 1):
        a.round = b.round = round_
        rounds.append(a._problems())
        assert b._problems() == rounds[-1]
    assert rounds[0] != rounds[1]
    vertical_a, vertical_b = make_node(hub, "va", seed=1), make_node(hub, "vb", seed=2)
    assert vertical_a._problems() != vertical_b._problems()  # vertical: each node its own prompts
    assert shared_group_id("run-1", 3, 2) == "run-1/3/2"


# --- config ---------------------------------------------------------------------------------------------------


def test_horizontal_grouping_needs_rounds_mode(tmp_path):
    assert LoopConfig().grouping == "vertical"
    path = tmp_path / "horizontal.toml"
    path.write_text('[loop]\ngrouping = "horizontal"\n')
    with pytest.raises(ConfigError, match=r"loop: .*needs mode = \"rounds\""):
        load_config(path)
    path.write_text('[loop]\nmode = "rounds"\ngrouping = "horizontal"\nswarm_seed = 3\n')
    assert load_config(path).loop.swarm_seed == 3
    for bad in ('grouping = "diagonal"', "swarm_seed = -1"):
        path.write_text(f'[loop]\nmode = "rounds"\n{bad}\n')
        with pytest.raises(ConfigError, match=r"loop\."):
            load_config(path)
    assert NodeConfig.model_validate({"loop": {"mode": "rounds", "grouping": "horizontal"}}).loop.swarm_seed == 0
