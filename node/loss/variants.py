"""The five loss variants of the ablations per token, and the one table that names them at both granularities.

Every variant computes  L = −(1/N) Σ_i (1/|a_i|) Σ_t w_t · s_t · keep_i  (docs/loss.md) and differs only in
three choices (made once for both granularities in ``choices.py``):

| variant | ratio R_t in s_t      | weight w_t                     | filter |
|---------|-----------------------|--------------------------------|--------|
| nois    | π_θ / π_θold          | 1                              | no     |
| vis     | π_θ / π_gen           | 1                              | no     |
| tis     | π_θ / π_θold          | min(π_θold / π_gen, C), detached | no     |
| ftis    | π_θ / π_θold          | min(π_θold / π_gen, C), detached | yes    |
| fvis    | π_θ / π_gen           | 1                              | yes    |

N counts the *active* completions: those in groups with reward variance that have at least one
token. Completions of zero-variance groups are skipped (not counted in N); filtered completions
stay in N with keep_i = 0 (Â_i := 0). Advantages are computed over each group: a micro-batch holds whole groups,
or brings each completion's advantage computed over its whole group (``LossInputs.advantages``: a trainer that
splits a group across forward passes); ``figures.num_sequences`` gives N so a trainer can re-weight micro-batches
exactly. The same holds per sequence (``sequence.py``), for groups whose generator used another
tokenizer: a micro-batch holds groups of one granularity, and ``LOSS_VARIANTS`` gives each name both forms.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ftis.node.loss.advantages import active_completions
from ftis.node.loss.choices import variants
from ftis.node.loss.sequence import SEQUENCE_VARIANTS
from ftis.node.loss.terms import (
    FilterDecision,
    clipped_surrogate,
    k3_divergence,
    loss_figures,
    lowest_window_mean,
    masked_mean_per_sequence,
)
from ftis.node.loss.types import LossInputs, LossOutputs, LossParams, SequenceLossInputs


@dataclass(frozen=True)
class _Batch:
    """The inputs made safe: float32, zero at padded positions, plus what every variant needs."""

    logprobs: Tensor  # (B, T) with gradient
    old_logprobs: Tensor  # (B, T) detached
    sampler_logprobs: Tensor  # (B, T) detached
    mask: Tensor  # (B, T) bool
    advantages: Tensor  # (B,)
    active: Tensor  # (B,) bool, completions that enter the mean
    eligible: Tensor  # (B,) bool, active completions the filter applies to
    divergence: Tensor  # (B,) D_i
    lowest_window: Tensor  # (B,) the lowest mean of old_logprobs over surprise_window tokens in a row
    zero_variance_groups: Tensor  # ()

    @property
    def positions(self) -> Tensor:  # where a log-ratio exists: the completion tokens
        return self.mask


def _prepare(inputs: LossInputs, params: LossParams) -> _Batch:
    mask = inputs.loss_mask.bool()

    def clean(values: Tensor) -> Tensor:  # padding may hold NaN/-inf: select, never multiply
        return torch.where(mask, values.float(), 0.0)

    old = clean(inputs.old_logprobs.detach())
    sampler = clean(inputs.sampler_logprobs.detach())
    completions = active_completions(inputs.rewards, inputs.group_ids, inputs.off_policy, mask.any(-1),
                                     params.advantage_norm, inputs.advantages)
    return _Batch(
        logprobs=clean(inputs.logprobs),
        old_logprobs=old,
        sampler_logprobs=sampler,
        mask=mask,
        divergence=k3_divergence(sampler, old, mask),
        lowest_window=lowest_window_mean(old, mask, params.surprise_window),
        **completions.__dict__,  # advantages, active, eligible, zero_variance_groups
    )


def _finish(
    batch: _Batch,
    params: LossParams,
    *,
    ratio_base: Tensor,
    weight: Tensor,
    reported_weight: Tensor,
    truncated: Tensor,
    decision: FilterDecision,
) -> LossOutputs:
    """The shared tail: surrogate, weight, keep, sequence mean, batch mean, figures."""
    keep = batch.active & ~decision.dropped  # (B,)
    used = batch.mask & keep[:, None]  # (B, T) tokens that carry gradient
    # Only used tokens reach exp(): a dropped peer completion with an absurd log-prob must not
    # produce inf, since inf · 0 is NaN in both the value and the gradient.
    log_ratio = torch.where(used, batch.logprobs - ratio_base, 0.0)  # (B, T)
    per_token = weight * clipped_surrogate(log_ratio, batch.advantages[:, None], params.epsilon)
    per_sequence = masked_mean_per_sequence(per_token, used)  # (B,)
    loss = -per_sequence.sum() / batch.active.sum().clamp(min=1)
    figures = loss_figures(batch.mask, batch.active, batch.eligible, batch.divergence, batch.zero_variance_groups,
                           reported_weight, truncated, decision)
    return LossOutputs(loss, figures, decision.by_divergence, decision.implausible)


LossFunction = Callable[[LossInputs, LossParams], LossOutputs]
SequenceLossFunction = Callable[[SequenceLossInputs, LossParams], LossOutputs]


@dataclass(frozen=True)
class LossVariant:
    """One variant at both granularities. Which one a group gets is not a setting but a fact about it: per
    token when its generator shares this node's tokenizer, per sequence (``sequence.py``) when not."""

    per_token: LossFunction
    per_sequence: SequenceLossFunction


TOKEN_VARIANTS: dict[str, LossFunction] = variants(_prepare, _finish)
LOSS_VARIANTS: dict[str, LossVariant] = {
    name: LossVariant(TOKEN_VARIANTS[name], SEQUENCE_VARIANTS[name]) for name in TOKEN_VARIANTS
}


def compute_loss(variant: str, inputs: LossInputs | SequenceLossInputs, params: LossParams) -> LossOutputs:
    """The loss of the variant named ``variant``, per token for ``LossInputs`` and per sequence for
    ``SequenceLossInputs``; a ValueError lists the names when it is unknown."""
    try:
        loss_variant = LOSS_VARIANTS[variant]
    except KeyError:
        raise ValueError(f"unknown loss variant {variant!r}; choose one of {sorted(LOSS_VARIANTS)}") from None
    if isinstance(inputs, SequenceLossInputs):
        return loss_variant.per_sequence(inputs, params)
    return loss_variant.per_token(inputs, params)
