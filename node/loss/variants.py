"""The five loss variants of the ablations, and the one table that names them.

Every variant computes  L = −(1/N) Σ_i (1/|a_i|) Σ_t w_t · s_t · keep_i  (docs/loss.md) and differs only in
three choices, made explicitly in each function below:

| variant | ratio R_t in s_t      | weight w_t                     | filter |
|---------|-----------------------|--------------------------------|--------|
| nois    | π_θ / π_θold          | 1                              | no     |
| vis     | π_θ / π_gen           | 1                              | no     |
| tis     | π_θ / π_θold          | min(π_θold / π_gen, C), detached | no     |
| ftis    | π_θ / π_θold          | min(π_θold / π_gen, C), detached | yes    |
| fvis    | π_θ / π_gen           | 1                              | yes    |

N counts the *active* completions: those in groups with reward variance that have at least one
token. Completions of zero-variance groups are skipped (not counted in N); filtered completions
stay in N with keep_i = 0 (Â_i := 0). A micro-batch must hold whole groups, since advantages are
computed over each group; ``metrics.num_sequences`` gives N so a trainer can re-weight
micro-batches exactly.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ftis.node.loss.advantages import group_advantages
from ftis.node.loss.terms import (
    MAX_LOG_RATIO,
    FilterDecision,
    clipped_surrogate,
    k3_divergence,
    masked_mean_per_sequence,
    offpolicy_filter,
    truncated_is_weight,
)
from ftis.node.loss.types import LossInputs, LossMetrics, LossOutputs, LossParams


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
    zero_variance_groups: Tensor  # ()


def _prepare(inputs: LossInputs, params: LossParams) -> _Batch:
    mask = inputs.loss_mask.bool()

    def clean(values: Tensor) -> Tensor:  # padding may hold NaN/-inf: select, never multiply
        return torch.where(mask, values.float(), 0.0)

    old = clean(inputs.old_logprobs.detach())
    sampler = clean(inputs.sampler_logprobs.detach())
    groups = group_advantages(inputs.rewards, inputs.group_ids, params.advantage_norm)
    active = groups.informative & mask.any(-1)
    return _Batch(
        logprobs=clean(inputs.logprobs),
        old_logprobs=old,
        sampler_logprobs=sampler,
        mask=mask,
        advantages=groups.advantages,
        active=active,
        eligible=active & inputs.off_policy.bool(),
        divergence=k3_divergence(sampler, old, mask),
        zero_variance_groups=groups.zero_variance_groups,
    )


def _no_filter(batch: _Batch) -> FilterDecision:
    nothing = torch.zeros_like(batch.active)
    return FilterDecision(nothing, nothing, nothing)


def _filter(batch: _Batch, params: LossParams) -> FilterDecision:
    return offpolicy_filter(
        batch.advantages, batch.divergence, batch.eligible, params.divergence_threshold, params.filter_rule
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
    """The shared tail: surrogate, weight, keep, sequence mean, batch mean, metrics."""
    keep = batch.active & ~decision.dropped  # (B,)
    used = batch.mask & keep[:, None]  # (B, T) tokens that carry gradient
    # Only used tokens reach exp(): a dropped peer completion with an absurd log-prob must not
    # produce inf, since inf · 0 is NaN in both the value and the gradient.
    log_ratio = torch.where(used, batch.logprobs - ratio_base, 0.0)  # (B, T)
    per_token = weight * clipped_surrogate(log_ratio, batch.advantages[:, None], params.epsilon)
    per_sequence = masked_mean_per_sequence(per_token, used)  # (B,)
    num_sequences = batch.active.sum()
    loss = -per_sequence.sum() / num_sequences.clamp(min=1)
    return LossOutputs(loss, _metrics(batch, num_sequences, reported_weight, truncated, decision),
                       decision.by_divergence)


def _metrics(
    batch: _Batch, num_sequences: Tensor, weight: Tensor, truncated: Tensor, decision: FilterDecision
) -> LossMetrics:
    tokens = batch.mask & batch.active[:, None]  # (B, T)
    num_tokens = tokens.sum().clamp(min=1)
    per_sequence = num_sequences.clamp(min=1)
    weight = weight.detach()
    return LossMetrics(
        num_sequences=num_sequences,
        filtered_fraction=decision.dropped.sum() / per_sequence,
        filtered_advantage_fraction=decision.by_advantage.sum() / per_sequence,
        filtered_divergence_fraction=decision.by_divergence.sum() / per_sequence,
        is_weight_mean=torch.where(tokens, weight, 0.0).sum() / num_tokens,
        is_weight_max=torch.where(tokens, weight, 0.0).amax() if weight.numel() else weight.new_zeros(()),
        truncated_fraction=(truncated & tokens).sum() / num_tokens,
        divergence_mean=torch.where(batch.eligible, batch.divergence, 0.0).sum() / batch.eligible.sum().clamp(min=1),
        zero_variance_groups=batch.zero_variance_groups,
    )


def nois_loss(inputs: LossInputs, params: LossParams) -> LossOutputs:
    """No correction: every sample is treated as on-policy (w = 1, ratio to π_θold)."""
    batch = _prepare(inputs, params)
    ones = torch.ones_like(batch.old_logprobs)
    never = torch.zeros_like(batch.mask)
    return _finish(batch, params, ratio_base=batch.old_logprobs, weight=ones, reported_weight=ones,
                   truncated=never, decision=_no_filter(batch))


def _vis(batch: _Batch, params: LossParams, decision: FilterDecision) -> LossOutputs:
    """The ratio is taken to π_gen (with gradient), PPO-clipped, never truncated; w = 1. The reported
    IS weight is that ratio, π_θ / π_gen, detached (at most exp(MAX_LOG_RATIO), as in the surrogate)."""
    log_ratio = torch.where(batch.mask, batch.logprobs.detach() - batch.sampler_logprobs, 0.0)
    ratio = torch.exp(log_ratio.clamp(max=MAX_LOG_RATIO))
    return _finish(batch, params, ratio_base=batch.sampler_logprobs, weight=torch.ones_like(ratio),
                   reported_weight=ratio, truncated=torch.zeros_like(batch.mask), decision=decision)


def vis_loss(inputs: LossInputs, params: LossParams) -> LossOutputs:
    """Vanilla IS: the PPO ratio to the generator's policy instead of π_θold, no truncation."""
    batch = _prepare(inputs, params)
    return _vis(batch, params, _no_filter(batch))


def _tis(batch: _Batch, params: LossParams, decision: FilterDecision) -> LossOutputs:
    """w = min(π_θold / π_gen, C), detached, times the PPO surrogate against π_θold."""
    weight, truncated = truncated_is_weight(batch.old_logprobs, batch.sampler_logprobs, params.clip_c)
    return _finish(batch, params, ratio_base=batch.old_logprobs, weight=weight, reported_weight=weight,
                   truncated=truncated, decision=decision)


def tis_loss(inputs: LossInputs, params: LossParams) -> LossOutputs:
    """Truncated IS, applied to every completion, without the filter."""
    batch = _prepare(inputs, params)
    return _tis(batch, params, _no_filter(batch))


def ftis_loss(inputs: LossInputs, params: LossParams) -> LossOutputs:
    """F-TIS: TIS plus the filter on off-policy completions (the default)."""
    batch = _prepare(inputs, params)
    return _tis(batch, params, _filter(batch, params))


def fvis_loss(inputs: LossInputs, params: LossParams) -> LossOutputs:
    """VIS plus the filter on off-policy completions."""
    batch = _prepare(inputs, params)
    return _vis(batch, params, _filter(batch, params))


LossFunction = Callable[[LossInputs, LossParams], LossOutputs]

LOSS_VARIANTS: dict[str, LossFunction] = {
    "nois": nois_loss,
    "vis": vis_loss,
    "tis": tis_loss,
    "ftis": ftis_loss,
    "fvis": fvis_loss,
}


def compute_loss(variant: str, inputs: LossInputs, params: LossParams) -> LossOutputs:
    """The loss of the variant named ``variant``; a ValueError lists the names when it is unknown."""
    try:
        loss_fn = LOSS_VARIANTS[variant]
    except KeyError:
        raise ValueError(f"unknown loss variant {variant!r}; choose one of {sorted(LOSS_VARIANTS)}") from None
    return loss_fn(inputs, params)
