"""The per-sequence variants (groups whose generator used another tokenizer) against the obvious slow loop.

Run: python -m pytest tests/test_loss_sequence.py -q

``naive_sequence_loss`` never calls the implementation's helpers: it walks the completions one at a time,
sums log-probs over each one's tokens by hand, and builds the loss from scalar torch ops on single elements
of ``logprobs`` (everything else a Python float), so autograd gives the reference gradient. Padded positions
are never read; the batches put NaN and -inf there, and NaN in the claim of a completion without tokens.
Then: what the sequence form reduces to on one tokenizer, the gradient by hand and by finite differences,
the edge cases, and a peer that lies about log π_gen(y).
"""

import math
from dataclasses import dataclass

import pytest
import torch
from helpers.loss_cases import HAND_LAYOUT, PARAMS, assert_matches, batch_cases, gradient, hand_old, random_layout

from ftis.node.loss import LOSS_VARIANTS, LossInputs, LossParams, SequenceLossInputs, compute_loss
from ftis.node.loss.terms import MAX_LOG_RATIO

VARIANTS = ["nois", "vis", "tis", "ftis", "fvis"]
STD_EPS = 1e-6
METRIC_NAMES = [
    "num_sequences", "filtered_fraction", "filtered_advantage_fraction", "filtered_divergence_fraction",
    "is_weight_mean", "is_weight_max", "truncated_fraction", "divergence_mean", "zero_variance_groups",
]  # fmt: skip


@dataclass
class Naive:
    loss: torch.Tensor  # () float64, a function of logprobs
    metrics: dict[str, float]


def k3(x: float) -> float:
    return math.exp(x) - x - 1


def naive_advantages(rewards: list[float], group_ids: list[int], norm: str) -> tuple[list[float], list[bool], int]:
    members: dict[int, list[int]] = {}
    for i, group in enumerate(group_ids):
        members.setdefault(group, []).append(i)
    advantage, informative, skipped = [0.0] * len(rewards), [False] * len(rewards), 0
    for group in members.values():
        values = [rewards[i] for i in group]
        if all(r == values[0] for r in values):
            skipped += 1
            continue
        mean = sum(values) / len(values)
        std = math.sqrt(sum((r - mean) ** 2 for r in values) / (len(values) - 1))
        for i, r in zip(group, values, strict=True):
            informative[i] = True
            advantage[i] = (r - mean) / (std + STD_EPS) if norm == "std" else r - mean
    return advantage, informative, skipped


def naive_sequence_loss(variant: str, inputs: SequenceLossInputs, params: LossParams) -> Naive:
    """L = −(1/N) Σ_i w_i · s_i · keep_i, one completion at a time, every mean over this node's L_i tokens."""
    B, T = inputs.loss_mask.shape
    tokens = [[t for t in range(T) if inputs.loss_mask[i, t]] for i in range(B)]
    advantage, informative, skipped = naive_advantages(
        [float(r) for r in inputs.rewards], [int(g) for g in inputs.group_ids], params.advantage_norm)
    active = [informative[i] and len(tokens[i]) > 0 for i in range(B)]
    n = sum(active)
    to_generator = variant in ("vis", "fvis")
    lo, hi = 1 - params.epsilon, 1 + params.epsilon

    total = torch.zeros((), dtype=torch.float64)
    weights, truncated, dropped, divergence = [], 0, [False] * B, [0.0] * B
    for i in range(B):
        if not active[i]:
            continue
        length = len(tokens[i])
        old_mean = sum(float(inputs.old_logprobs[i, t]) for t in tokens[i]) / length
        generator_mean = float(inputs.sampler_sequence_logprobs[i]) / length
        divergence[i] = k3(generator_mean - old_mean)
        if variant in ("ftis", "fvis") and inputs.off_policy[i]:
            bad, far = advantage[i] <= 0, divergence[i] > params.divergence_threshold
            dropped[i] = (bad or far) if params.filter_rule == "or" else (bad and far)
        logprob_mean = sum(inputs.logprobs[i, t].double() for t in tokens[i]) / length
        uncapped = logprob_mean - (generator_mean if to_generator else old_mean)
        ratio = torch.exp(uncapped.clamp(max=MAX_LOG_RATIO) if advantage[i] < 0 else uncapped)
        w = 1.0
        if variant in ("tis", "ftis"):
            raw = math.exp(old_mean - generator_mean)
            truncated += length if raw > params.clip_c else 0
            w = min(raw, params.clip_c)
        reported = math.exp(min(float(uncapped.detach()), MAX_LOG_RATIO)) if to_generator else w
        weights += [reported] * length  # a completion's weight counts once per token
        clipped_ratio = lo if ratio < lo else hi if ratio > hi else ratio
        if not dropped[i]:
            total = total + w * min(ratio * advantage[i], clipped_ratio * advantage[i])
    loss = -total / max(n, 1)

    eligible_d = [divergence[i] for i in range(B) if active[i] and inputs.off_policy[i]]
    g = params.divergence_threshold
    metrics = {
        "num_sequences": float(n),
        "filtered_fraction": sum(dropped) / max(n, 1),
        "filtered_advantage_fraction": sum(d and advantage[i] <= 0 for i, d in enumerate(dropped)) / max(n, 1),
        "filtered_divergence_fraction": sum(d and divergence[i] > g for i, d in enumerate(dropped)) / max(n, 1),
        "is_weight_mean": sum(weights) / len(weights) if weights else 0.0,
        "is_weight_max": max(weights) if weights else 0.0,
        "truncated_fraction": truncated / len(weights) if weights else 0.0,
        "divergence_mean": sum(eligible_d) / len(eligible_d) if eligible_d else 0.0,
        "zero_variance_groups": float(skipped),
    }
    return Naive(loss, metrics)


# ---------------------------------------------------------------------------------------------------
# Batches, written per completion i over this node's tokens t:
#   delta_t = logprobs − old           (the sequence ratio ρ_i = exp(mean_t delta_t))
#   gap_i   = −x̄_i = mean_t old_t − log π_gen(y_i) / L_i   (w_i = exp(gap_i), truncated at C = 2 above 0.693;
#                                                            D_i = k3(−gap_i))
# The claim log π_gen(y_i) = Σ_t old_t − L_i gap_i. Padded positions hold NaN and -inf.


def _garbage(B: int, T: int) -> torch.Tensor:
    return torch.where(torch.arange(T)[None, :] % 2 == 0, torch.nan, -torch.inf).expand(B, T)


def sequence_inputs(old, delta, gap, lengths, rewards, group_ids, off_policy) -> SequenceLossInputs:
    B, T = old.shape
    mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]  # (B, T)
    lengths_t = torch.tensor(lengths, dtype=torch.float64)
    claim = torch.where(mask, old, 0.0).sum(-1) - lengths_t * gap
    claim = torch.where(lengths_t > 0, claim, torch.nan)  # a completion without tokens: nothing may read it

    def pad(values):
        return torch.where(mask, values, _garbage(B, T)).float()

    return SequenceLossInputs(
        logprobs=pad(old + delta).requires_grad_(),
        old_logprobs=pad(old),
        sampler_sequence_logprobs=claim.float(),
        loss_mask=mask,
        rewards=torch.tensor(rewards, dtype=torch.float32),
        group_ids=torch.tensor(group_ids, dtype=torch.int64),
        off_policy=torch.tensor(off_policy, dtype=torch.bool),
    )


def hand_batch() -> SequenceLossInputs:
    """Groups 0 and 7 informative, 3 with equal rewards, 5 a single completion; row 5 has no tokens."""
    delta = torch.tensor([
        [0.00, 0.10, -0.10, 0.05],  # mean 0.0125: ρ inside the clip range
        [0.30, 0.40, 0.00, 0.00],  # mean 0.35: ρ = 1.42, above
        [-0.35, -0.25, -0.30, 0.00],  # mean −0.3: ρ = 0.74, below
        [-0.05, 0.50, 0.00, 0.00],
        [0.20, -0.20, 0.10, 0.00],  # group 7
        [0.00, 0.00, 0.00, 0.00],  # no tokens at all
        [-0.25, 0.05, 0.40, -0.15],
        [0.10, 0.10, 0.00, 0.00],  # group 3: rewards all equal
        [0.30, 0.00, 0.00, 0.00],
        [0.10, -0.30, 0.20, 0.00],  # group 5: a single completion
    ], dtype=torch.float64)  # fmt: skip
    gap = torch.tensor([
        0.0,  # own fresh sample: w = 1, D = 0
        1.0,  # w = e, truncated to 2; D = k3(−1) = 0.37
        -2.0,  # w = 0.14; D = k3(2) = 4.4 > g
        3.0,  # w truncated; D = k3(−3) = 1.05 > g
        -0.5, 0.0, 0.2, 1.5, -1.0, 0.4,
    ], dtype=torch.float64)  # fmt: skip
    return sequence_inputs(hand_old(), delta, gap, **HAND_LAYOUT)


def random_batch(seed: int, groups: int = 3, group_size: int = 4, T: int = 6) -> SequenceLossInputs:
    generator = torch.Generator().manual_seed(seed)
    B = groups * group_size
    scale = torch.tensor([0.1, 0.7, 2.5], dtype=torch.float64)[torch.randint(0, 3, (B,), generator=generator)]
    old = -3 * torch.rand(B, T, generator=generator, dtype=torch.float64) - 0.05
    delta = (0.2 * torch.randn(B, 1, generator=generator, dtype=torch.float64)
             + 0.2 * torch.randn(B, T, generator=generator, dtype=torch.float64))
    gap = scale * torch.randn(B, generator=generator, dtype=torch.float64)
    return sequence_inputs(old, delta, gap, **random_layout(generator, groups, group_size, T, min_length=0))


BATCHES = batch_cases(hand_batch, random_batch)


def _metrics(out) -> dict[str, float]:
    return {name: float(getattr(out.figures, name)) for name in METRIC_NAMES}


@pytest.mark.parametrize("params_name", PARAMS)
@pytest.mark.parametrize("batch_name", BATCHES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_matches_naive_loop(variant: str, batch_name: str, params_name: str) -> None:
    inputs, params = BATCHES[batch_name](), PARAMS[params_name]
    assert_matches(compute_loss(variant, inputs, params), naive_sequence_loss(variant, inputs, params), inputs.logprobs)


def test_batches_exercise_every_branch() -> None:
    """Guards the comparison above against vacuity: the batches reach every branch of the math."""
    seen: dict[str, set[str]] = {name: set() for name in ("ratio", "weight", "dropped")}
    for make in BATCHES.values():
        inputs = make()
        mask = inputs.loss_mask
        lengths = mask.sum(-1)
        has = lengths > 0
        mean_delta = (torch.where(mask, inputs.logprobs - inputs.old_logprobs, 0.0).sum(-1) / lengths)[has]
        seen["ratio"] |= {"below" if x < math.log(0.8) else "above" if x > math.log(1.2) else "inside"
                          for x in mean_delta.tolist()}
        gap = (torch.where(mask, inputs.old_logprobs, 0.0).sum(-1) - inputs.sampler_sequence_logprobs)[has]
        seen["weight"] |= {"truncated" if x > math.log(2.0) * n else "kept" for x, n in
                           zip(gap.tolist(), lengths[has].tolist(), strict=True)}
        for params in PARAMS.values():
            metrics = naive_sequence_loss("ftis", inputs, params).metrics
            if metrics["filtered_advantage_fraction"] > 0:
                seen["dropped"].add(f"{params.filter_rule}-advantage")
            if metrics["filtered_divergence_fraction"] > 0:
                seen["dropped"].add(f"{params.filter_rule}-divergence")
    assert seen["ratio"] == {"below", "inside", "above"}
    assert seen["weight"] == {"truncated", "kept"}
    assert seen["dropped"] == {"or-advantage", "or-divergence", "and-advantage", "and-divergence"}


# --- One tokenizer: the sequence form is the per-token form with completion means -------------------


def one_tokenizer_pair(sequences: SequenceLossInputs) -> tuple[SequenceLossInputs, LossInputs]:
    """The same completions as a same-tokenizer group would carry them: per-token sampler log-probs whose sum
    is the claim, scattered around their mean, and the per-token inputs with every row's log-ratio and
    log-weight replaced by its mean (what the sequence form reads)."""
    mask = sequences.loss_mask
    B, T = mask.shape
    lengths = mask.sum(-1, keepdim=True).clamp(min=1)
    old = torch.where(mask, sequences.old_logprobs, 0.0).double()
    delta = torch.where(mask, sequences.logprobs.detach(), 0.0).double() - old
    gap = (old.sum(-1, keepdim=True) - torch.nan_to_num(sequences.sampler_sequence_logprobs.double())[:, None])
    gap = gap / lengths  # (B, 1) the mean log-weight
    scatter = torch.where(mask, torch.linspace(-0.6, 0.6, T, dtype=torch.float64).expand(B, T), 0.0)
    scatter = torch.where(mask, scatter - scatter.sum(-1, keepdim=True) / lengths, 0.0)  # zero mean per row
    sampler = old - gap - scatter  # per-token sampler log-probs that sum to the claim
    garbage = _garbage(B, T)
    same = SequenceLossInputs(
        logprobs=sequences.logprobs.detach().clone().requires_grad_(),
        old_logprobs=sequences.old_logprobs,
        sampler_sequence_logprobs=torch.where(mask, sampler, 0.0).sum(-1).float(),
        loss_mask=mask, rewards=sequences.rewards, group_ids=sequences.group_ids, off_policy=sequences.off_policy,
    )
    mean_delta = delta.sum(-1, keepdim=True) / lengths
    averaged = LossInputs(
        logprobs=torch.where(mask, old + mean_delta, garbage).float().requires_grad_(),
        old_logprobs=torch.where(mask, old, garbage).float(),
        sampler_logprobs=torch.where(mask, old - gap, garbage).float(),
        loss_mask=mask, rewards=sequences.rewards, group_ids=sequences.group_ids, off_policy=sequences.off_policy,
    )
    return same, averaged


@pytest.mark.parametrize("params_name", PARAMS)
@pytest.mark.parametrize("batch_name", BATCHES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_one_tokenizer_reduces_to_the_per_token_form_of_completion_means(variant, batch_name, params_name):
    """With this node's tokens the generator's (the claim is Σ_t sampler_t), the sequence form equals the
    tested per-token form run on the same completions with each token's log-ratio log(π_θ/π_θold) and
    log-weight log(π_θold/π_gen) replaced by its completion's mean: loss, gradient (per token, since both
    spread a completion's gradient evenly over its tokens once the ratio is the mean), filter and metrics."""
    same, averaged = one_tokenizer_pair(BATCHES[batch_name]())
    params = PARAMS[params_name]
    sequence = compute_loss(variant, same, params)
    per_token = compute_loss(variant, averaged, params)

    torch.testing.assert_close(sequence.loss, per_token.loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(gradient(sequence.loss, same.logprobs), gradient(per_token.loss, averaged.logprobs),
                               rtol=1e-5, atol=1e-6)
    assert torch.equal(sequence.divergence_filtered, per_token.divergence_filtered)
    assert _metrics(sequence) == pytest.approx(_metrics(per_token), rel=1e-5, abs=1e-6)


def test_on_one_tokenizer_the_weight_is_the_geometric_mean_of_the_token_weights() -> None:
    """At the first step (ρ = R = 1) with C = ∞, completion i's gradient sums to −(1/N) Â_i times the arithmetic
    mean of its token weights per token, and to −(1/N) Â_i times their geometric mean per sequence: no more."""
    old = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -4.0, -1.0], [-2.0, -0.1, -0.7]])
    log_w = torch.tensor([[0.9, -0.6, 0.0], [0.5, 0.5, 0.5], [-1.2, 0.3, 0.6]])  # per-token log π_θold/π_gen
    rewards, group_ids, off_policy = torch.tensor([1.0, 0.0, 0.5]), torch.zeros(3, dtype=torch.int64), torch.ones(3)
    mask = torch.ones(3, 3, dtype=torch.bool)
    params = LossParams(clip_c=math.inf, divergence_threshold=math.inf)
    per_token = LossInputs(old.clone().requires_grad_(), old, old - log_w, mask, rewards, group_ids,
                           off_policy.bool())
    sequence = SequenceLossInputs(old.clone().requires_grad_(), old, (old - log_w).sum(-1), mask, rewards,
                                  group_ids, off_policy.bool())
    compute_loss("tis", per_token, params).loss.backward()
    compute_loss("tis", sequence, params).loss.backward()

    advantages = (rewards - rewards.mean()) / (rewards.std() + STD_EPS)
    torch.testing.assert_close(per_token.logprobs.grad.sum(-1), -(1 / 3) * advantages * log_w.exp().mean(-1))
    torch.testing.assert_close(sequence.logprobs.grad.sum(-1), -(1 / 3) * advantages * log_w.mean(-1).exp())
    assert (sequence.logprobs.grad.sum(-1).abs() <= per_token.logprobs.grad.sum(-1).abs() + 1e-7).all()
    # Row 1's token weights are all equal: there the two agree.
    torch.testing.assert_close(sequence.logprobs.grad[1], per_token.logprobs.grad[1])


# --- The gradient, by hand and by finite differences ---------------------------------------------------


def test_gradient_by_hand() -> None:
    """∂L/∂logprobs[i, t] = −(1/N) w_i Â_i ρ_i / L_i where ρ_i Â_i is the smaller term of s_i, and 0 where the
    clip is (rows 1 and 3, ρ outside [0.8, 1.2] on the flat side), for every token t of completion i."""
    old = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -4.0, 0.0], [-2.0, -0.1, -0.7], [-1.5, -1.5, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    mean_delta = torch.tensor([0.1, 0.3, -0.15, -0.4])  # ρ = 1.105, 1.35 (flat: Â > 0), 0.86, 0.67 (flat: Â < 0)
    gap = torch.tensor([0.2, -0.4, 1.0, 0.3])  # w = 1.22, 0.67, 2 (truncated from e), 1.35
    lengths = mask.sum(-1)
    claim = torch.where(mask, old, 0.0).sum(-1) - lengths * gap
    logprobs = torch.where(mask, old + mean_delta[:, None], 0.0).requires_grad_()
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0])
    inputs = SequenceLossInputs(logprobs, old, claim, mask, rewards, torch.zeros(4, dtype=torch.int64),
                                torch.ones(4, dtype=torch.bool))
    out = compute_loss("tis", inputs, LossParams())
    out.loss.backward()

    advantage = 0.5 / (math.sqrt(1 / 3) + STD_EPS) * torch.tensor([1.0, 1.0, -1.0, -1.0])
    w = gap.exp().clamp(max=2.0)
    rho = mean_delta.exp()
    unclipped = torch.tensor([1.0, 0.0, 1.0, 0.0])
    expected = -(1 / 4) * (w * advantage * rho * unclipped / lengths)[:, None] * mask
    torch.testing.assert_close(logprobs.grad, expected)
    clipped_rho = rho.clamp(0.8, 1.2)
    expected_loss = -(1 / 4) * (w * torch.minimum(rho * advantage, clipped_rho * advantage)).sum()
    torch.testing.assert_close(out.loss, expected_loss)


@pytest.mark.parametrize("variant", VARIANTS)
def test_gradient_matches_central_differences(variant: str) -> None:
    """Away from the clip's kinks, autograd's gradient is the loss's slope in every masked log-prob."""
    inputs = random_batch(3, groups=2, group_size=3, T=4)
    params = LossParams(divergence_threshold=1.0)
    out = compute_loss(variant, inputs, params)
    grad = gradient(out.loss, inputs.logprobs)
    assert grad.abs().sum() > 0
    h = 1e-2
    for i, t in inputs.loss_mask.nonzero().tolist():
        values = []
        for step in (h, -h):
            moved = inputs.logprobs.detach().clone()
            moved[i, t] += step
            shifted = SequenceLossInputs(moved, inputs.old_logprobs, inputs.sampler_sequence_logprobs,
                                         inputs.loss_mask, inputs.rewards, inputs.group_ids, inputs.off_policy)
            values.append(float(compute_loss(variant, shifted, params).loss))
        assert (values[0] - values[1]) / (2 * h) == pytest.approx(float(grad[i, t]), abs=2e-4), (i, t)


def test_no_gradient_reaches_old_logprobs_or_the_claim() -> None:
    old = torch.tensor([[-1.0, -0.5], [-2.0, -0.2], [-0.7, -1.1]], requires_grad=True)
    claim = torch.tensor([-2.5, -0.4, -4.0], requires_grad=True)
    logprobs = (old.detach() + torch.tensor([[0.05, -0.1], [0.3, 0.0], [-0.3, 0.1]])).requires_grad_()
    inputs = SequenceLossInputs(logprobs, old, claim, torch.ones(3, 2, dtype=torch.bool),
                                torch.tensor([1.0, 0.0, 0.5]), torch.zeros(3, dtype=torch.int64),
                                torch.tensor([True, False, True]))
    for variant in VARIANTS:
        out = compute_loss(variant, inputs, LossParams(divergence_threshold=100.0))
        out.loss.backward()
        assert old.grad is None and claim.grad is None
        assert not any(getattr(out.figures, name).requires_grad for name in METRIC_NAMES)
    assert logprobs.grad is not None and logprobs.grad.abs().sum() > 0


# --- Edge cases -----------------------------------------------------------------------------------------


def test_completion_without_tokens_is_not_counted_but_its_reward_is() -> None:
    """Row 3 has no tokens (and a NaN claim): it leaves N (3, not 4) but stays in its group's mean and std."""
    old = torch.full((4, 2), -1.0)
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [0, 0]], dtype=torch.bool)
    claim = torch.tensor([-2.0, -1.0, -2.0, torch.nan])  # every weight 1
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])  # mean 0.5, sample std 1/√3
    inputs = SequenceLossInputs(old.clone().requires_grad_(), old, claim, mask, rewards,
                                torch.full((4,), 4), torch.ones(4, dtype=torch.bool))
    out = compute_loss("ftis", inputs, LossParams(filter_rule="and"))
    out.loss.backward()

    a = 0.5 / (1 / math.sqrt(3) + STD_EPS)
    assert float(out.figures.num_sequences) == 3
    assert float(out.loss.detach()) == pytest.approx(-(a - a - a) / 3, rel=1e-6)
    torch.testing.assert_close(inputs.logprobs.grad, torch.tensor([[-a / 6, -a / 6], [a / 3, 0.0],
                                                                   [a / 6, a / 6], [0.0, 0.0]]))


@pytest.mark.parametrize("variant", VARIANTS)
def test_batch_without_tokens_gives_zero_loss_and_zerogradient(variant: str) -> None:
    nan = torch.full((3, 4), torch.nan)
    inputs = SequenceLossInputs(nan.clone().requires_grad_(), nan, torch.full((3,), torch.nan),
                                torch.zeros(3, 4, dtype=torch.bool), torch.tensor([1.0, 0.0, 0.5]),
                                torch.zeros(3, dtype=torch.int64), torch.tensor([True, True, False]))
    out = compute_loss(variant, inputs, LossParams())
    assert float(out.loss.detach()) == 0.0
    assert torch.equal(gradient(out.loss, inputs.logprobs), torch.zeros(3, 4))
    assert all(value == 0.0 for value in _metrics(out).values())


@pytest.mark.parametrize("variant", VARIANTS)
def test_equal_rewards_teach_nothing(variant: str) -> None:
    old = torch.tensor([[-1.0, -2.0], [-0.5, -0.5], [-3.0, -0.1], [-1.0, -1.0], [-0.2, -2.0]])
    inputs = SequenceLossInputs((old + 0.3).requires_grad_(), old, old.sum(-1) - 4.0,
                                torch.ones(5, 2, dtype=torch.bool), torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0]),
                                torch.tensor([0, 0, 0, 1, 1]), torch.ones(5, dtype=torch.bool))
    out = compute_loss(variant, inputs, LossParams())
    assert float(out.loss.detach()) == 0.0
    assert torch.equal(gradient(out.loss, inputs.logprobs), torch.zeros(5, 2))
    assert _metrics(out) == {name: 2.0 if name == "zero_variance_groups" else 0.0 for name in METRIC_NAMES}


@pytest.mark.parametrize("rule", ["or", "and"])
@pytest.mark.parametrize("variant", ["ftis", "fvis"])
def test_all_filtered_gives_zero_loss_but_counts_them(variant: str, rule: str) -> None:
    """Every completion is a peer's, far (D = k3(−3) = 1.05 > g = 1) and, for two of them, below the mean:
    "or" drops all four, "and" the two with Â < 0. Dropped ones stay in N."""
    old = torch.tensor([[-1.0, -2.0], [-0.5, -0.5], [-3.0, -0.1], [-1.0, -1.0]])
    claim = old.sum(-1) + 2 * 3.0  # x̄ = +3: the generator found its text e³ likelier per token than we do
    inputs = SequenceLossInputs(old.clone().requires_grad_(), old, claim, torch.ones(4, 2, dtype=torch.bool),
                                torch.tensor([1.0, 1.0, 0.0, 0.0]), torch.zeros(4, dtype=torch.int64),
                                torch.ones(4, dtype=torch.bool))
    out = compute_loss(variant, inputs, LossParams(divergence_threshold=1.0, filter_rule=rule))
    grad = gradient(out.loss, inputs.logprobs)
    assert float(out.figures.num_sequences) == 4
    assert float(out.figures.filtered_divergence_fraction) == (1.0 if rule == "or" else 0.5)
    assert out.divergence_filtered.tolist() == ([True] * 4 if rule == "or" else [False, False, True, True])
    if rule == "or":
        assert float(out.loss.detach()) == 0.0 and torch.equal(grad, torch.zeros(4, 2))
    else:
        assert torch.equal(grad[2:], torch.zeros(2, 2)) and (grad[:2] != 0).all()


# --- A peer that lies about log π_gen(y) ------------------------------------------------------------------


def _liar_batch(claim: float) -> SequenceLossInputs:
    """Row 0 is a peer's completion with the best reward (the case a liar wants amplified) and the claim;
    rows 1–3 are honest. This node scores row 0's text at −1 per token."""
    old = torch.tensor([[-1.0, -1.0, -1.0], [-0.5, -2.0, -1.0], [-1.5, -0.3, -0.2], [-0.8, -0.8, -0.9]])
    claims = torch.cat([torch.tensor([claim]), old[1:].sum(-1) - 0.1])
    return SequenceLossInputs(old.clone().requires_grad_(), old, claims, torch.ones(4, 3, dtype=torch.bool),
                              torch.tensor([1.0, 0.5, 0.0, 0.0]), torch.zeros(4, dtype=torch.int64),
                              torch.tensor([True, True, True, False]))


FLOAT32_MAX = float(torch.finfo(torch.float32).max)


@pytest.mark.parametrize("claim", [-1e9, -FLOAT32_MAX, -1e30, 0.0, 1e9, FLOAT32_MAX])
@pytest.mark.parametrize("rule", ["or", "and"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_lying_peer_stays_finite_and_bounded(variant: str, rule: str, claim: float) -> None:
    """Any finite claim (the decoder refuses NaN, ±inf and claims above 0; the pure function must not need
    it) leaves the loss, the gradient and every metric finite, and the truncated weight at most C."""
    inputs = _liar_batch(claim)
    out = compute_loss(variant, inputs, LossParams(filter_rule=rule))
    grad = gradient(out.loss, inputs.logprobs)
    assert torch.isfinite(out.loss) and torch.isfinite(grad).all()
    assert all(math.isfinite(value) for value in _metrics(out).values())
    if variant in ("tis", "ftis"):
        assert float(out.figures.is_weight_max) <= 2.0


@pytest.mark.parametrize("claim", [-1e9, -FLOAT32_MAX, 1e9])
def test_an_absurd_claim_is_filtered_or_bounded_by_c(claim: float) -> None:
    """x̄ = ±huge: D > g, so "or" drops the liar's completion (no gradient); "and" keeps it (Â > 0), at weight
    C for the low claims, whose gradient is then exactly C times that of the same completion written by this
    node (an honest own sample, w = 1): a lie buys at most C, as with per-token log-probs."""
    dropped = compute_loss("ftis", _liar_batch(claim), LossParams(filter_rule="or"))
    inputs = _liar_batch(claim)
    kept = compute_loss("ftis", inputs, LossParams(filter_rule="and"))
    grad = gradient(kept.loss, inputs.logprobs)
    assert bool(dropped.divergence_filtered[0]) and not bool(kept.divergence_filtered[0])

    own = _liar_batch(float(inputs.old_logprobs[0].sum()))  # the claim an on-policy sample makes: w = 1
    own_grad = gradient(compute_loss("ftis", own, LossParams(filter_rule="and")).loss, own.logprobs)
    expected_weight = 2.0 if claim < 0 else 0.0  # 1e9: it claims a text likelier than certain, and weighs 0
    torch.testing.assert_close(grad[0], expected_weight * own_grad[0], rtol=1e-5, atol=1e-12)


def test_the_best_lie_buys_weight_c_undetected() -> None:
    """A liar that knows this node's log π_θold(y) claims log π_θold(y) − L log C: weight exactly C, and
    D = k3(−log C) ≈ 0.19, under any g above that. This is the bound: the filter cannot see it, the truncation
    caps it. A claim of 0 (certainty) weighs the completion down instead: w = π_θold(y)^(1/L) = e⁻¹ here."""
    best = _liar_batch(-3.0 - 3 * math.log(2.0))
    out = compute_loss("ftis", best, LossParams())
    assert float(out.figures.is_weight_max) == pytest.approx(2.0)
    assert not bool(out.divergence_filtered[0])  # kept: only row 2 (a peer's, Â < 0) is dropped
    assert float(out.figures.filtered_fraction) == pytest.approx(1 / 4)

    def row_zerogradient(claim: float) -> torch.Tensor:
        inputs = _liar_batch(claim)
        return gradient(compute_loss("tis", inputs, LossParams()).loss, inputs.logprobs)[0]

    honest = row_zerogradient(-3.0)  # the claim of an on-policy sample: w = 1
    torch.testing.assert_close(row_zerogradient(-3.0 - 3 * math.log(2.0)), 2.0 * honest)
    torch.testing.assert_close(row_zerogradient(0.0), math.exp(-1.0) * honest)


# --- The table --------------------------------------------------------------------------------------------


def test_every_variant_has_both_forms_and_compute_loss_picks_by_input() -> None:
    inputs = hand_batch()
    for name, variant in LOSS_VARIANTS.items():
        assert torch.equal(variant.per_sequence(inputs, PARAMS["or-std"]).loss,
                           compute_loss(name, inputs, PARAMS["or-std"]).loss)
    with pytest.raises(ValueError, match="ftis"):
        compute_loss("gspo", inputs, LossParams())
