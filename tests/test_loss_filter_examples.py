"""The F in F-TIS, worked by hand: which completions each filter rule drops, row by row.

Run: python -m pytest tests/test_loss_filter_examples.py -q

One batch of eight completions, three tokens each. Group 0 is six completions of one prompt; group 1
is two completions whose rewards are equal, so it is skipped before the filter ever sees it. The
threshold g is 1. Each row's divergence is chosen through x = sampler − old per token:
D_i = mean_t k3(x_t), k3(x) = e^x − x − 1.

Group 0's rewards 0, 1, 1.5, 0, 0, 0.5 have mean 0.5, so the signs of Â are −, +, +, −, −, 0 (row 5's
Â is exactly 0, which counts as Â ≤ 0).
"""

import math

import pytest
import torch

from ftis.node.loss import LossInputs, LossParams, compute_loss, group_advantages
from ftis.node.loss.terms import k3_divergence, offpolicy_filter

THRESHOLD = 1.0
REWARDS = torch.tensor([0.0, 1.0, 1.5, 0.0, 0.0, 0.5, 1.0, 1.0])
GROUP_IDS = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1])
OFF_POLICY = torch.tensor([False, True, True, True, True, True, True, False])
X = torch.tensor([
    [3.0, 0.0, 0.0],  # 0  own fresh sample   Â < 0   D = 5.36 > g
    [0.5, -0.5, 0.5],  # 1  peer              Â > 0   D = 0.13
    [2.0, 0.0, -1.0],  # 2  peer              Â > 0   D = 1.59 > g
    [0.2, -0.2, 0.0],  # 3  peer              Â < 0   D = 0.01
    [-3.0, -3.0, -3.0],  # 4  peer            Â < 0   D = 2.05 > g
    [0.0, 0.0, 0.0],  # 5  peer               Â = 0   D = 0
    [-3.0, -3.0, -3.0],  # 6  peer, group 1   skipped D = 2.05 > g
    [0.0, 0.0, 0.0],  # 7  own, group 1       skipped D = 0
])  # fmt: skip
OLD = torch.tensor([-3.5, -4.0, -5.0]).expand(8, 3)  # low enough that sampler = old + x stays a log-prob
MASK = torch.ones(8, 3, dtype=torch.bool)

EXPECTED_DROPPED = {
    "or": [
        False,  # 0 kept: own fresh sample; the filter never looks at it, however bad or far
        False,  # 1 kept: Â > 0 and D ≤ g
        True,  # 2 dropped: D > g; a positive Â does not save it under "or"
        True,  # 3 dropped: Â < 0
        True,  # 4 dropped: Â < 0 and D > g, counted under both reasons
        True,  # 5 dropped: Â = 0 is Â ≤ 0
        False,  # 6 not dropped: its group is skipped, so it is not active and not counted in N
        False,  # 7 not dropped: skipped group, and own sample
    ],
    "and": [
        False,  # 0 kept: own fresh sample
        False,  # 1 kept: Â > 0 and D ≤ g
        False,  # 2 kept: D > g, but Â > 0
        False,  # 3 kept: Â < 0, but D ≤ g
        True,  # 4 dropped: Â < 0 and D > g, the only row where both hold
        False,  # 5 kept: Â = 0, but D ≤ g
        False,  # 6 not dropped: skipped group
        False,  # 7 not dropped: skipped group
    ],
}


def example_inputs() -> LossInputs:
    return LossInputs(
        logprobs=OLD.clone().requires_grad_(),  # the first step on the batch: R = 1
        old_logprobs=OLD,
        sampler_logprobs=OLD + X,
        loss_mask=MASK,
        rewards=REWARDS,
        group_ids=GROUP_IDS,
        off_policy=OFF_POLICY,
    )


def test_example_has_the_divergences_and_advantages_it_claims() -> None:
    k3 = [sum(math.exp(x) - x - 1 for x in row) / 3 for row in X.tolist()]
    divergence = k3_divergence(OLD + X, OLD, MASK)
    torch.testing.assert_close(divergence, torch.tensor(k3))
    assert (divergence > THRESHOLD).tolist() == [True, False, True, False, True, False, True, False]

    groups = group_advantages(REWARDS, GROUP_IDS)
    assert torch.sign(groups.advantages).tolist() == [-1, 1, 1, -1, -1, 0, 0, 0]
    assert groups.informative.tolist() == [True] * 6 + [False] * 2
    assert int(groups.zero_variance_groups) == 1


@pytest.mark.parametrize("rule", ["or", "and"])
def test_filter_helper_drops_exactly_the_expected_rows(rule: str) -> None:
    groups = group_advantages(REWARDS, GROUP_IDS)
    eligible = groups.informative & MASK.any(-1) & OFF_POLICY  # active, off-policy completions
    decision = offpolicy_filter(groups.advantages, k3_divergence(OLD + X, OLD, MASK), eligible, THRESHOLD, rule)

    expected = torch.tensor(EXPECTED_DROPPED[rule])
    assert decision.dropped.tolist() == expected.tolist()
    assert decision.by_advantage.tolist() == (expected & (groups.advantages <= 0)).tolist()
    assert decision.by_divergence.tolist() == (expected & torch.tensor([True, False] * 4)).tolist()


# N = 6 (group 0); by reason, "or" drops rows 3, 4, 5 for Â ≤ 0 and rows 2, 4 for D > g.
EXPECTED_METRICS = {
    "or": {"filtered_fraction": 4 / 6, "filtered_advantage_fraction": 3 / 6, "filtered_divergence_fraction": 2 / 6},
    "and": {"filtered_fraction": 1 / 6, "filtered_advantage_fraction": 1 / 6, "filtered_divergence_fraction": 1 / 6},
}
# Rows whose log-probs get a gradient: kept, and Â ≠ 0 (row 5 is kept under "and" but Â = 0).
EXPECTED_LEARNING = {"or": [0, 1], "and": [0, 1, 2, 3]}


@pytest.mark.parametrize("variant", ["ftis", "fvis"])
@pytest.mark.parametrize("rule", ["or", "and"])
def test_loss_drops_the_same_rows_and_reports_why(rule: str, variant: str) -> None:
    inputs = example_inputs()
    out = compute_loss(variant, inputs, LossParams(divergence_threshold=THRESHOLD, filter_rule=rule))
    out.loss.backward()

    learning = (inputs.logprobs.grad.abs().sum(-1) > 0).nonzero().flatten().tolist()
    assert learning == EXPECTED_LEARNING[rule]
    assert int(out.figures.num_sequences) == 6
    assert int(out.figures.zero_variance_groups) == 1
    for name, value in EXPECTED_METRICS[rule].items():
        assert float(getattr(out.figures, name)) == pytest.approx(value), name
    # The mean divergence is over the active off-policy rows 1–5, whichever rule dropped them.
    k3 = [sum(math.exp(x) - x - 1 for x in row) / 3 for row in X[1:6].tolist()]
    assert float(out.figures.divergence_mean) == pytest.approx(sum(k3) / 5, rel=1e-6)


@pytest.mark.parametrize("rule", ["or", "and"])
def test_unfiltered_variants_drop_nothing(rule: str) -> None:
    """nois, vis and tis see the same batch and filter rule, and keep every active row."""
    for variant in ("nois", "vis", "tis"):
        out = compute_loss(variant, example_inputs(), LossParams(divergence_threshold=THRESHOLD, filter_rule=rule))
        assert float(out.figures.filtered_fraction) == 0.0
