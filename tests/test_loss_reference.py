"""The five loss variants against the obvious slow one: a per-token Python loop written from docs/loss.md.

Run: python -m pytest tests/test_loss_reference.py -q

``naive_loss`` below never calls the implementation's helpers. It walks the completions and tokens
one at a time, computes each group's mean and sample std by hand, and builds the loss from scalar
torch ops on single elements of ``logprobs`` (everything else is a Python float), so autograd gives
the reference gradient. Padded positions are never read, which is what "unpadded" means here: the
batches below put NaN and -inf there and the implementation must not notice.
"""

import math
from dataclasses import dataclass

import pytest
import torch
from helpers.loss_cases import HAND_LAYOUT, PARAMS, assert_matches, batch_cases, hand_old, random_layout

from ftis.node.loss import LOSS_VARIANTS, LossInputs, LossParams, compute_loss
from ftis.node.loss.terms import MAX_LOG_RATIO

VARIANTS = ["nois", "vis", "tis", "ftis", "fvis"]
STD_EPS = 1e-6


@dataclass
class Naive:
    loss: torch.Tensor  # () float64, a function of logprobs
    metrics: dict[str, float]


def k3(x: float) -> float:
    return math.exp(x) - x - 1


def naive_loss(variant: str, inputs: LossInputs, params: LossParams) -> Naive:
    """L = −(1/N) Σ_i (1/|a_i|) Σ_t w_t · s_t · keep_i, one completion and one token at a time."""
    B, T = inputs.loss_mask.shape
    tokens = [[t for t in range(T) if inputs.loss_mask[i, t]] for i in range(B)]
    old = [[float(inputs.old_logprobs[i, t]) for t in range(T)] for i in range(B)]
    sampler = [[float(inputs.sampler_logprobs[i, t]) for t in range(T)] for i in range(B)]

    # Group advantages over every member of the group, sample std (divide by n - 1).
    members: dict[int, list[int]] = {}
    for i in range(B):
        members.setdefault(int(inputs.group_ids[i]), []).append(i)
    advantage = [0.0] * B
    informative = [False] * B
    zero_variance_groups = 0
    for group in members.values():
        rewards = [float(inputs.rewards[i]) for i in group]
        if all(r == rewards[0] for r in rewards):
            zero_variance_groups += 1
            continue
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))
        for i, r in zip(group, rewards, strict=True):
            informative[i] = True
            advantage[i] = (r - mean) / (std + STD_EPS) if params.advantage_norm == "std" else r - mean

    active = [informative[i] and len(tokens[i]) > 0 for i in range(B)]
    n = sum(active)
    divergence = [
        sum(k3(sampler[i][t] - old[i][t]) for t in tokens[i]) / len(tokens[i]) if tokens[i] else 0.0
        for i in range(B)
    ]
    eligible = [active[i] and bool(inputs.off_policy[i]) for i in range(B)]
    g = params.divergence_threshold
    dropped = [False] * B
    if variant in ("ftis", "fvis"):
        for i in range(B):
            bad, far = advantage[i] <= 0, divergence[i] > g
            dropped[i] = eligible[i] and ((bad or far) if params.filter_rule == "or" else (bad and far))

    lo, hi = 1 - params.epsilon, 1 + params.epsilon
    total = torch.zeros((), dtype=torch.float64)
    weights, truncated = [], 0  # over the masked tokens of active completions
    for i in range(B):
        if not active[i]:
            continue
        sequence = torch.zeros((), dtype=torch.float64)
        for t in tokens[i]:
            logprob = inputs.logprobs[i, t].double()
            base = sampler[i][t] if variant in ("vis", "fvis") else old[i][t]
            # R_t = exp(logprob - base), capped at exp(MAX_LOG_RATIO) where no PPO clip bounds it (Â < 0)
            uncapped = logprob - base
            ratio = torch.exp(uncapped.clamp(max=MAX_LOG_RATIO) if advantage[i] < 0 else uncapped)
            if variant in ("vis", "fvis"):
                w = 1.0
                weights.append(math.exp(min(float(uncapped.detach()), MAX_LOG_RATIO)))
            else:
                w = 1.0
                if variant in ("tis", "ftis"):
                    raw = math.exp(old[i][t] - sampler[i][t])
                    truncated += raw > params.clip_c
                    w = min(raw, params.clip_c)
                weights.append(w)
            clipped_ratio = lo if ratio < lo else hi if ratio > hi else ratio
            s = min(ratio * advantage[i], clipped_ratio * advantage[i])
            sequence = sequence + w * s
        if not dropped[i]:
            total = total + sequence / len(tokens[i])
    loss = -total / max(n, 1)

    per_sequence = max(n, 1)
    eligible_d = [divergence[i] for i in range(B) if eligible[i]]
    metrics = {
        "num_sequences": float(n),
        "filtered_fraction": sum(dropped) / per_sequence,
        "filtered_advantage_fraction": sum(d and advantage[i] <= 0 for i, d in enumerate(dropped)) / per_sequence,
        "filtered_divergence_fraction": sum(d and divergence[i] > g for i, d in enumerate(dropped)) / per_sequence,
        "is_weight_mean": sum(weights) / len(weights) if weights else 0.0,
        "is_weight_max": max(weights) if weights else 0.0,
        "truncated_fraction": truncated / len(weights) if weights else 0.0,
        "divergence_mean": sum(eligible_d) / len(eligible_d) if eligible_d else 0.0,
        "zero_variance_groups": float(zero_variance_groups),
    }
    return Naive(loss, metrics)


# ---------------------------------------------------------------------------------------------------
# Batches. Only differences of log-probs matter, so each batch is written as
#   delta = logprobs − old   (the PPO ratio R = exp(delta); inside the clip range iff −0.223 < delta < 0.182)
#   gap   = old − sampler    (the TIS weight exp(gap), truncated at C = 2 when gap > 0.693;
#                             the divergence of a token is k3(−gap))
# around an arbitrary old_logprobs. Padded positions get NaN and −inf.


def _inputs(old, delta, gap, lengths, rewards, group_ids, off_policy) -> LossInputs:
    B, T = old.shape
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # (B, T)
    garbage = torch.where(torch.arange(T)[None, :] % 2 == 0, torch.nan, -torch.inf).expand(B, T)

    def pad(values):
        return torch.where(mask, values, garbage).float()

    return LossInputs(
        logprobs=pad(old + delta).requires_grad_(),
        old_logprobs=pad(old),
        sampler_logprobs=pad(old - gap),
        loss_mask=mask,
        rewards=torch.tensor(rewards, dtype=torch.float32),
        group_ids=torch.tensor(group_ids, dtype=torch.int64),
        off_policy=torch.tensor(off_policy, dtype=torch.bool),
    )


def hand_batch() -> LossInputs:
    """Four groups: two informative (ids 0, 7), one with equal rewards (3), one of a single completion (5)."""
    delta = torch.tensor([
        [0.00, 0.10, -0.10, 0.05],  # group 0: every ratio inside the clip range
        [0.30, -0.40, 0.00, 0.00],  # ratios 1.35 and 0.67, outside on both sides
        [0.15, 0.25, -0.30, 0.00],
        [-0.05, 0.50, 0.00, 0.00],
        [0.20, -0.20, 0.10, 0.00],  # group 7
        [0.00, 0.00, 0.00, 0.00],  # no tokens at all
        [-0.25, 0.05, 0.40, -0.15],
        [0.10, 0.10, 0.00, 0.00],  # group 3: rewards all equal
        [0.30, 0.00, 0.00, 0.00],
        [0.10, -0.30, 0.20, 0.00],  # group 5: a single completion
    ], dtype=torch.float64)  # fmt: skip
    gap = torch.tensor([
        [0.00, 0.00, 0.00, 0.00],  # own fresh sample: w = 1, D = 0
        [1.00, 0.30, 0.00, 0.00],  # w = 2.72 (truncated to 2) and 1.35; D = 0.19
        [-2.00, -1.50, 0.50, 0.00],  # w = 0.14, 0.22, 1.65; D = k3(2), k3(1.5), k3(-0.5): 2.3 > g
        [3.00, 2.50, 0.00, 0.00],  # w truncated on both tokens; D = 1.6 > g
        [-0.50, 0.20, 0.80, 0.00],
        [0.00, 0.00, 0.00, 0.00],
        [2.00, -3.00, 0.10, 0.90],  # D = 4.6 > g
        [1.50, 1.50, 0.00, 0.00],
        [-1.00, 0.00, 0.00, 0.00],
        [0.40, 0.40, 0.40, 0.00],
    ], dtype=torch.float64)  # fmt: skip
    return _inputs(hand_old(), delta, gap, **HAND_LAYOUT)


def random_batch(seed: int, groups: int = 3, group_size: int = 4, T: int = 6) -> LossInputs:
    generator = torch.Generator().manual_seed(seed)
    B = groups * group_size
    scale = torch.tensor([0.1, 0.7, 2.5], dtype=torch.float64)[torch.randint(0, 3, (B,), generator=generator)]
    old = -3 * torch.rand(B, T, generator=generator, dtype=torch.float64) - 0.05
    delta = 0.3 * torch.randn(B, T, generator=generator, dtype=torch.float64)
    gap = scale[:, None] * torch.randn(B, T, generator=generator, dtype=torch.float64)
    return _inputs(old, delta, gap, **random_layout(generator, groups, group_size, T, min_length=1))


BATCHES = batch_cases(hand_batch, random_batch)


@pytest.mark.parametrize("params_name", PARAMS)
@pytest.mark.parametrize("batch_name", BATCHES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_matches_naive_loop(variant: str, batch_name: str, params_name: str) -> None:
    inputs, params = BATCHES[batch_name](), PARAMS[params_name]
    assert_matches(compute_loss(variant, inputs, params), naive_loss(variant, inputs, params), inputs.logprobs)


def test_batches_exercise_every_branch() -> None:
    """Guards the comparison above against vacuity: the batches reach every branch of the math."""
    seen = {name: set() for name in ("ratio", "weight", "dropped")}
    for make in BATCHES.values():
        inputs = make()
        mask = inputs.loss_mask
        log_ratio = (inputs.logprobs - inputs.old_logprobs).detach()[mask]
        seen["ratio"] |= {"below" if x < math.log(0.8) else "above" if x > math.log(1.2) else "inside"
                          for x in log_ratio.tolist()}
        log_weight = (inputs.old_logprobs - inputs.sampler_logprobs)[mask]
        seen["weight"] |= {"truncated" if x > math.log(2.0) else "kept" for x in log_weight.tolist()}
        for params in PARAMS.values():
            metrics = naive_loss("ftis", inputs, params).metrics
            if metrics["filtered_advantage_fraction"] > 0:
                seen["dropped"].add(f"{params.filter_rule}-advantage")
            if metrics["filtered_divergence_fraction"] > 0:
                seen["dropped"].add(f"{params.filter_rule}-divergence")
    assert seen["ratio"] == {"below", "inside", "above"}
    assert seen["weight"] == {"truncated", "kept"}
    assert seen["dropped"] == {"or-advantage", "or-divergence", "and-advantage", "and-divergence"}


@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_functions_equal_compute_loss(variant: str) -> None:
    inputs, params = hand_batch(), PARAMS["or-std"]
    direct = LOSS_VARIANTS[variant].per_token(inputs, params)
    assert torch.equal(direct.loss, compute_loss(variant, inputs, params).loss)
