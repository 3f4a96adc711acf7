"""The edge cases docs/loss.md names, each with the answer worked out in the test.

Run: python -m pytest tests/test_loss_edges.py -q

Most tests sit at logprobs == old_logprobs (the first step on a batch), where R_t = 1 lies inside the
clip range, so the surrogate's gradient is exactly w_t · Â_i and the expected values are one line of
arithmetic: ∂L/∂logprobs[i, t] = −(1/N) (1/|a_i|) w_t Â_i on kept tokens, 0 elsewhere.
"""

import math

import pytest
import torch

from ftis.node.loss import LOSS_VARIANTS, LossInputs, LossParams, compute_loss
from ftis.node.loss.terms import MAX_LOG_RATIO

VARIANTS = ["nois", "vis", "tis", "ftis", "fvis"]
METRIC_NAMES = [
    "num_sequences", "filtered_fraction", "filtered_advantage_fraction", "filtered_divergence_fraction",
    "is_weight_mean", "is_weight_max", "truncated_fraction", "divergence_mean", "zero_variance_groups",
]  # fmt: skip


def make_inputs(logprobs, old, sampler, mask, rewards, group_ids, off_policy=None) -> LossInputs:
    B = len(rewards)
    return LossInputs(
        logprobs=torch.as_tensor(logprobs, dtype=torch.float32).clone().requires_grad_(),
        old_logprobs=torch.as_tensor(old, dtype=torch.float32),
        sampler_logprobs=torch.as_tensor(sampler, dtype=torch.float32),
        loss_mask=torch.as_tensor(mask, dtype=torch.bool),
        rewards=torch.as_tensor(rewards, dtype=torch.float32),
        group_ids=torch.as_tensor(group_ids, dtype=torch.int64),
        off_policy=torch.zeros(B, dtype=torch.bool) if off_policy is None else torch.as_tensor(off_policy),
    )


def loss_and_grad(variant: str, inputs: LossInputs, params: LossParams | None = None):
    out = compute_loss(variant, inputs, params or LossParams())
    out.loss.backward()
    return out, inputs.logprobs.grad


def metrics_of(out) -> dict[str, float]:
    return {name: float(getattr(out.figures, name)) for name in METRIC_NAMES}


# --- C = ∞ is plain importance-weighted policy gradient ---------------------------------------------


def test_infinite_clip_is_plain_importance_weighted_policy_gradient() -> None:
    old = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -4.0, -1.0], [-2.0, -0.1, -0.7], [-1.5, -1.5, -1.5]])
    gap = torch.tensor([[3.0, 0.5, -1.0], [2.0, -2.0, 0.0], [0.1, 4.0, 1.5], [-0.5, 0.9, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.5])
    inputs = make_inputs(old, old, old - gap, mask, rewards, [0, 0, 0, 0])
    out, grad = loss_and_grad("tis", inputs, LossParams(clip_c=math.inf))

    advantages = (rewards - rewards.mean()) / (rewards.std() + 1e-6)  # torch.std is the sample std
    w = torch.exp(gap)  # untruncated: up to e^4 ≈ 55
    lengths = mask.sum(-1, keepdim=True)
    expected_grad = torch.where(mask, -(1 / 4) * w * advantages[:, None] / lengths, 0.0)
    torch.testing.assert_close(grad, expected_grad)
    torch.testing.assert_close(out.loss, expected_grad.sum())  # at R = 1, L equals the sum of its gradient
    assert float(out.figures.truncated_fraction) == 0.0
    assert float(out.figures.is_weight_max) == pytest.approx(math.exp(4.0), rel=1e-6)

    # The same batch with C = 2 differs exactly on the truncated tokens.
    truncated, grad_c2 = loss_and_grad("tis", make_inputs(old, old, old - gap, mask, rewards, [0] * 4))
    expected_c2 = torch.where(mask, -(1 / 4) * w.clamp(max=2.0) * advantages[:, None] / lengths, 0.0)
    torch.testing.assert_close(grad_c2, expected_c2)
    assert float(truncated.figures.truncated_fraction) == pytest.approx(4 / 10)  # gaps 3, 2, 4 and 0.9


# --- No gradient through the weight -------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_no_gradient_reaches_old_or_sampler_logprobs(variant: str) -> None:
    """old and sampler log-probs are data: the weight is detached, so even leaves asking for a
    gradient get none, and only logprobs carries one."""
    old = torch.tensor([[-1.0, -0.5], [-2.0, -0.2], [-0.7, -1.1]], requires_grad=True)
    sampler = torch.tensor([[-2.5, -0.1], [-0.4, -1.0], [-0.7, -3.0]], requires_grad=True)
    logprobs = (old.detach() + torch.tensor([[0.05, -0.1], [0.3, 0.0], [-0.3, 0.1]])).requires_grad_()
    inputs = LossInputs(logprobs, old, sampler, torch.ones(3, 2, dtype=torch.bool), torch.tensor([1.0, 0.0, 0.5]),
                        torch.zeros(3, dtype=torch.int64), torch.tensor([True, False, True]))
    out = compute_loss(variant, inputs, LossParams(divergence_threshold=100.0))
    out.loss.backward()
    assert old.grad is None and sampler.grad is None
    assert logprobs.grad is not None and logprobs.grad.abs().sum() > 0
    assert not any(getattr(out.figures, name).requires_grad for name in METRIC_NAMES)


# --- Empty masks --------------------------------------------------------------------------------------


def test_completion_without_tokens_is_not_counted_but_its_reward_is() -> None:
    """Row 3 has no tokens: it leaves N (3, not 4) but stays in its group's mean and std."""
    old = torch.full((4, 2), -1.0)
    mask = torch.tensor([[1, 1], [1, 0], [1, 1], [0, 0]], dtype=torch.bool)
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])  # mean 0.5, sample std 1/√3
    out, grad = loss_and_grad("nois", make_inputs(old, old, old, mask, rewards, [4, 4, 4, 4]))

    a = 0.5 / (1 / math.sqrt(3) + 1e-6)  # |Â_i|, the same for every row
    assert float(out.figures.num_sequences) == 3
    assert float(out.loss.detach()) == pytest.approx(-(a - a - a) / 3, rel=1e-6)
    expected = torch.tensor([[-a / 6, -a / 6], [a / 3, 0.0], [a / 6, a / 6], [0.0, 0.0]])
    torch.testing.assert_close(grad, expected)


@pytest.mark.parametrize("variant", VARIANTS)
def test_batch_without_tokens_gives_zero_loss_and_zero_gradient(variant: str) -> None:
    nan = torch.full((3, 4), torch.nan)
    inputs = make_inputs(nan, nan, nan, torch.zeros(3, 4), [1.0, 0.0, 0.5], [0, 0, 0], [True, True, False])
    out, grad = loss_and_grad(variant, inputs)
    assert float(out.loss.detach()) == 0.0
    assert torch.equal(grad, torch.zeros(3, 4))
    assert all(value == 0.0 for value in metrics_of(out).values())


# --- All-equal rewards, and a group of one ------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_equal_rewards_teach_nothing(variant: str) -> None:
    old = torch.tensor([[-1.0, -2.0], [-0.5, -0.5], [-3.0, -0.1], [-1.0, -1.0], [-0.2, -2.0]])
    inputs = make_inputs(old + 0.3, old, old - 2.0, torch.ones(5, 2), [1.0, 1.0, 1.0, 0.0, 0.0],
                         [0, 0, 0, 1, 1], [True] * 5)
    out, grad = loss_and_grad(variant, inputs)
    assert float(out.loss.detach()) == 0.0
    assert torch.equal(grad, torch.zeros(5, 2))
    assert metrics_of(out) == {name: 2.0 if name == "zero_variance_groups" else 0.0 for name in METRIC_NAMES}


@pytest.mark.parametrize("variant", VARIANTS)
def test_group_of_one_is_skipped(variant: str) -> None:
    """A lone completion (group 9) has no variance: it is counted as skipped and changes nothing else,
    even though it is off-policy, divergent and would otherwise be filtered."""
    old = torch.tensor([[-1.0, -2.0], [-0.5, -0.5], [-3.0, -0.1], [-1.0, -1.0]])
    delta = torch.tensor([[0.1, -0.3], [0.0, 0.5], [-0.1, 0.05], [0.2, 0.2]])
    gap = torch.tensor([[1.0, -0.4], [0.2, 0.3], [-1.0, 0.0], [-3.0, 4.0]])
    rewards, group_ids, off_policy = [1.0, 0.0, 0.25, 0.0], [2, 2, 2, 9], [False, True, True, True]
    args = (old + delta, old, old - gap, torch.ones(4, 2), rewards, group_ids, off_policy)
    with_single, grad = loss_and_grad(variant, make_inputs(*args))
    without, grad_without = loss_and_grad(variant, make_inputs(*(a[:3] for a in args)))

    assert float(with_single.figures.zero_variance_groups) == 1
    assert float(with_single.figures.num_sequences) == 3
    torch.testing.assert_close(with_single.loss, without.loss)
    torch.testing.assert_close(grad[:3], grad_without)
    assert torch.equal(grad[3], torch.zeros(2))


# --- Padding ------------------------------------------------------------------------------------------


def _padded(rows: list[list[float]], width: int, fill: float) -> torch.Tensor:
    return torch.tensor([row + [fill] * (width - len(row)) for row in rows])


RAGGED_OLD = [[-1.0, -0.2, -3.0, -0.7], [-0.5], [-2.0, -1.0], [-0.1, -0.1, -4.0], [-1.2, -0.8]]
RAGGED_DELTA = [[0.1, -0.3, 0.5, 0.0], [0.25], [-0.1, 0.1], [0.0, 0.4, -0.05], [0.15, -0.25]]
RAGGED_GAP = [[1.5, -0.5, 0.2, 0.0], [-3.0], [0.8, 2.0], [0.1, 0.1, -1.0], [0.0, 0.3]]


def ragged_inputs(width: int, fill: float) -> LossInputs:
    old = [list(row) for row in RAGGED_OLD]
    return make_inputs(
        _padded([[o + d for o, d in zip(*rows, strict=True)] for rows in zip(old, RAGGED_DELTA, strict=True)],
                width, fill),
        _padded(old, width, fill),
        _padded([[o - g for o, g in zip(*rows, strict=True)] for rows in zip(old, RAGGED_GAP, strict=True)],
                width, fill),
        _padded([[True] * len(row) for row in old], width, False),
        [1.0, 0.0, 0.5, 0.0, 1.0],
        [0, 0, 0, 1, 1],
        [True, True, False, True, True],
    )


@pytest.mark.parametrize("fill", [math.nan, -math.inf, math.inf, 1e30])
@pytest.mark.parametrize("variant", VARIANTS)
def test_padding_never_reaches_a_value_or_a_gradient(variant: str, fill: float) -> None:
    """Mixed lengths, laid out tight with zeros as padding, equal the same rows padded wider with garbage."""
    params = LossParams(divergence_threshold=1.0)
    clean, clean_grad = loss_and_grad(variant, ragged_inputs(width=4, fill=0.0), params)
    dirty, dirty_grad = loss_and_grad(variant, ragged_inputs(width=7, fill=fill), params)

    torch.testing.assert_close(dirty.loss, clean.loss)
    assert metrics_of(dirty) == pytest.approx(metrics_of(clean))
    torch.testing.assert_close(dirty_grad[:, :4], clean_grad)
    assert torch.equal(dirty_grad[:, 4:], torch.zeros(5, 3))
    assert torch.isfinite(dirty_grad).all()
    padding = ~ragged_inputs(width=4, fill=0.0).loss_mask
    assert torch.equal(dirty_grad[:, :4][padding], torch.zeros(int(padding.sum())))


@pytest.mark.parametrize("variant", VARIANTS)
def test_unpadded_batch_is_unchanged_by_garbage_columns(variant: str) -> None:
    old = torch.tensor([[-1.0, -0.2], [-0.5, -2.5], [-2.0, -1.0]])
    logprobs, sampler = old + torch.tensor([[0.1, -0.3], [0.0, 0.3], [0.2, 0.0]]), old - 1.0
    args = ([1.0, 0.0, 0.5], [0, 0, 0], [True, False, True])
    plain, plain_grad = loss_and_grad(variant, make_inputs(logprobs, old, sampler, torch.ones(3, 2), *args))

    def widen(values: torch.Tensor) -> torch.Tensor:  # two more columns of garbage
        return torch.cat([values, torch.tensor([[torch.nan, -torch.inf]] * 3)], dim=1)

    mask = torch.cat([torch.ones(3, 2), torch.zeros(3, 2)], dim=1)
    padded, padded_grad = loss_and_grad(variant, make_inputs(widen(logprobs), widen(old), widen(sampler), mask, *args))
    torch.testing.assert_close(padded.loss, plain.loss)
    torch.testing.assert_close(padded_grad, torch.cat([plain_grad, torch.zeros(3, 2)], dim=1))


# --- The variant table --------------------------------------------------------------------------------


def test_variant_table_names_exactly_five() -> None:
    assert set(LOSS_VARIANTS) == {"nois", "vis", "tis", "ftis", "fvis"}


def test_unknown_names_are_rejected() -> None:
    inputs = ragged_inputs(width=4, fill=0.0)
    with pytest.raises(ValueError, match="ftis"):  # the message lists the valid names
        compute_loss("grpo", inputs, LossParams())
    with pytest.raises(ValueError):
        compute_loss("ftis", inputs, LossParams(filter_rule="xor"))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        compute_loss("nois", inputs, LossParams(advantage_norm="max"))  # type: ignore[arg-type]


# --- A peer's absurd log-prob -------------------------------------------------------------------------


@pytest.mark.parametrize("rule", ["or", "and"])
@pytest.mark.parametrize("variant", ["ftis", "fvis"])
def test_dropped_completion_with_absurd_logprob_stays_finite(variant: str, rule: str) -> None:
    """Rows 0 and 1 are peers' samples the filter drops under both rules (Â < 0 and D > g): row 0's
    sampler log-prob is −1000 against this model's 0 (ratio e^1000, D ≈ 999), row 1's the reverse
    (k3 overflows to D = inf). Neither may turn the loss or any gradient into inf or NaN."""
    logprobs = torch.tensor([[0.0, 0.0], [-1000.0, -1000.0], [-1.0, -0.5], [-0.3, -2.0]])
    sampler = torch.tensor([[-1000.0, -1000.0], [0.0, 0.0], [-1.1, -0.45], [-0.3, -2.1]])
    inputs = make_inputs(logprobs, logprobs, sampler, torch.ones(4, 2), [0.0, 0.0, 1.0, 1.0], [0] * 4,
                         [True, True, False, True])
    out, grad = loss_and_grad(variant, inputs, LossParams(filter_rule=rule))

    assert torch.isfinite(out.loss)
    assert torch.isfinite(grad).all()
    assert torch.equal(grad[:2], torch.zeros(2, 2))
    assert float(out.figures.filtered_fraction) == 0.5
    assert grad[2:].abs().min() > 0  # the kept rows still learn


@pytest.mark.parametrize(("variant", "rule"), [("vis", "or"), ("vis", "and"), ("fvis", "and")])
def test_kept_completion_with_absurd_sampler_logprob_has_finite_gradient(variant, rule):
    # Row 0 has Â > 0 and a sampler log-prob of -1000, so R = π_θ/π_gen = e^1000 is far above 1 + ε:
    # the surrogate is flat there (gradient exactly 0), and nothing may turn into inf · 0 = NaN.
    logprobs = torch.zeros(4, 3, requires_grad=True)
    sampler = torch.zeros(4, 3)
    sampler[0] = -1000.0
    inputs = LossInputs(
        logprobs=logprobs,
        old_logprobs=torch.zeros(4, 3),
        sampler_logprobs=sampler,
        loss_mask=torch.ones(4, 3, dtype=torch.bool),
        rewards=torch.tensor([1.0, 0.0, 1.0, 0.0]),
        group_ids=torch.zeros(4, dtype=torch.long),
        off_policy=torch.ones(4, dtype=torch.bool),
    )
    out = compute_loss(variant, inputs, LossParams(filter_rule=rule))
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert torch.isfinite(logprobs.grad).all()
    assert torch.equal(logprobs.grad[0], torch.zeros(3))


# --- an absurd sampler log-prob under the ratio to π_gen ----------------------------------------------


@pytest.mark.parametrize(("variant", "rule"), [("vis", "or"), ("fvis", "and")])
def test_an_absurd_sampler_logprob_leaves_the_loss_and_gradient_finite(variant, rule) -> None:
    # A peer claims log-prob -120 for a token this node finds likely: R = π_θ / π_gen = e^119 overflows float32.
    # With Â < 0 no PPO clip bounds R from above, and neither variant drops the completion here (vis has no
    # filter; "and" needs D > g too), so the surrogate caps log R at MAX_LOG_RATIO: flat beyond, finite.
    logprobs = torch.tensor([[-1.0, -0.5], [-1.0, -0.5]])
    sampler = torch.tensor([[-1.0, -120.0], [-1.0, -0.5]])
    inputs = make_inputs(logprobs, logprobs, sampler, torch.ones(2, 2, dtype=torch.bool), [0.0, 1.0], [0, 0],
                         off_policy=[True, False])
    params = LossParams(filter_rule=rule, divergence_threshold=math.inf)  # nothing is divergence-filtered
    out, grad = loss_and_grad(variant, inputs, params)
    assert math.isfinite(float(out.loss.detach())) and torch.isfinite(grad).all()
    assert float(out.figures.is_weight_max) == pytest.approx(math.exp(MAX_LOG_RATIO), rel=1e-5)
    # The capped token is flat (no gradient); its neighbour, at R = 1, has the usual one: -(1/N)(1/|a|) Â.
    advantage = -0.5 / (math.sqrt(0.5) + 1e-6)  # (0 - 0.5) / the sample std of [0, 1]
    assert float(grad[0, 1]) == 0.0
    assert float(grad[0, 0]) == pytest.approx(-(1 / 2) * (1 / 2) * advantage, rel=1e-5)


def test_the_configs_table_of_what_each_variant_reads_is_what_its_loss_does() -> None:
    """``config.training.VARIANT_SETTINGS`` (a setting given to a variant that does not read it is refused) matches
    the loss: changing C, g or the filter's rule changes a variant's loss exactly where the table says it reads it."""
    from dataclasses import replace

    from ftis.node.config.training import VARIANT_SETTINGS

    inputs = dict(logprobs=[[-1.0, -1.0], [-2.0, -0.5], [-0.3, -1.5], [-1.0, -1.0]],
                  old=[[-1.0, -1.0], [-2.0, -0.5], [-0.3, -1.5], [-1.0, -1.0]],
                  sampler=[[-2.0, -3.0], [-0.5, -2.0], [-1.5, -0.2], [-3.0, -1.0]],  # weights far from 1 both ways
                  mask=[[True, True]] * 4, rewards=[1.0, 0.0, 1.0, 0.0], group_ids=[0, 0, 1, 1],
                  off_policy=[True] * 4)
    changes = {"clip_c": 1.05, "divergence_threshold": 0.0, "filter_rule": "and"}
    for variant in LOSS_VARIANTS:
        base = LossParams()
        for name, value in changes.items():
            first, _ = loss_and_grad(variant, make_inputs(**inputs), base)
            second, _ = loss_and_grad(variant, make_inputs(**inputs), replace(base, **{name: value}))
            reads = not torch.equal(first.loss.detach(), second.loss.detach())
            assert reads == (variant in VARIANT_SETTINGS[name]), (variant, name)
    schedule = ("divergence_threshold_end", "divergence_schedule_steps")
    assert all(VARIANT_SETTINGS[name] == VARIANT_SETTINGS["divergence_threshold"] for name in schedule)  # they move g


def test_a_setting_given_to_a_variant_that_does_not_read_it_is_refused(tmp_path) -> None:
    from ftis.node.config import ConfigError, LossConfig, load_config

    path = tmp_path / "node.toml"
    path.write_text('[loss]\nvariant = "nois"\nclip_c = 3.0\ndivergence_threshold = 5.0\n')
    with pytest.raises(ConfigError, match=r"variant 'nois' does not read clip_c, divergence_threshold, so the value "
                                          r"given would do nothing; .*clip_c: tis, ftis; divergence_threshold: ftis"):
        load_config(path)
    assert LossConfig(variant="tis", clip_c=3.0).clip_c == 3.0 and LossConfig(variant="nois", clip_c=2.0)  # default
    assert LossConfig(**LossConfig(variant="fvis", divergence_threshold=4.0).model_dump()).divergence_threshold == 4.0
