"""The step's figures, declared once in ``StepFigures``: each loss figure names what the loss returns, and
``LossSums`` combines micro-batches as declared, checked against the sums written out by hand."""

import pytest
import torch

from ftis.node.loss import LossFigures, LossOutputs
from ftis.node.trainer.step_figures import FIGURES, LossSums, StepFigures


def test_every_loss_figure_is_something_the_loss_returns():
    combined = {name for name, figure in FIGURES.items() if figure.combine is not None}
    assert combined <= {"loss", *LossFigures.__dataclass_fields__}
    assert {"loss", "filtered_fraction", "is_weight_mean", "is_weight_max", "divergence_mean"} <= combined


def outputs(loss: float, filtered: float, weight_mean: float, weight_max: float, truncated: float,
            divergence: float) -> LossOutputs:
    t = torch.tensor
    metrics = LossFigures(num_sequences=t(0), filtered_fraction=t(filtered), filtered_advantage_fraction=t(filtered),
                          filtered_divergence_fraction=t(0.0), filtered_implausible_fraction=t(0.0),
                          is_weight_mean=t(weight_mean),
                          is_weight_max=t(weight_max), truncated_fraction=t(truncated), divergence_mean=t(divergence),
                          zero_variance_groups=t(0))
    return LossOutputs(t(loss), metrics, torch.zeros(0, dtype=torch.bool), torch.zeros(0, dtype=torch.bool))


def test_micro_batches_combine_by_sequences_tokens_off_policy_and_max():
    sums = LossSums()
    # micro-batch 1: 2 completions of 3 tokens, 1 off-policy, a quarter of the step's completions
    mask, off_policy = torch.ones(2, 3, dtype=torch.bool), torch.tensor([True, False])
    sums.add(outputs(-1.0, 0.5, 1.0, 1.5, 0.0, 0.2), mask, off_policy, share=0.25)
    # micro-batch 2: 3 completions with 1 token each, all off-policy, three quarters
    mask, off_policy = torch.tensor([[True, False]] * 3), torch.ones(3, dtype=torch.bool)
    sums.add(outputs(2.0, 0.0, 2.0, 1.25, 1.0, 0.6), mask, off_policy, share=0.75)
    figures = sums.figures()
    assert figures["loss"] == pytest.approx(-1.0 * 0.25 + 2.0 * 0.75)  # as the step's loss weighs them
    assert figures["filtered_fraction"] == pytest.approx(0.5 * 0.25)
    assert figures["is_weight_mean"] == pytest.approx((1.0 * 6 + 2.0 * 3) / 9)  # per token
    assert figures["truncated_fraction"] == pytest.approx(3 / 9)
    assert figures["divergence_mean"] == pytest.approx((0.2 * 1 + 0.6 * 3) / 4)  # per off-policy completion
    assert figures["is_weight_max"] == 1.5 and sums.tokens == 9


def test_a_step_not_taken_is_zero_in_every_number():
    step = StepFigures(policy_version=4, zero_variance_groups=3, seconds=0.5)
    assert not step.trained and step.loss == 0.0 and step.tokens == 0 and step.tokens_per_s == 0.0
    assert step.filtered_by_peer == {} and step.nonfinite_peers == []
