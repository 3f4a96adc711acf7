"""The five variants per sequence, for groups whose generator used another tokenizer (docs/loss.md).

A node cannot compare its per-token log-probs with a generator whose tokens are different; what both can
score is the completion text y. The generator sends log π_gen(y), its sampler log-probs summed over its own
tokens; this node tokenizes y with its own tokenizer, L_i tokens, and scores them (``SequenceLossInputs``).
With every mean over those L_i tokens of this node (L = this node's token count, docs/loss.md says why):

    x̄_i = (log π_gen(y_i) − log π_θold(y_i)) / L_i             the normalised log-ratio, no gradient
    w_i = min(exp(−x̄_i), C)                                      the truncated weight, no gradient
    D_i = k3(x̄_i) = exp(x̄_i) − x̄_i − 1                         the divergence the filter reads
    ρ_i = exp((log π_θ(y_i) − log π_θold(y_i)) / L_i)            the sequence ratio (GSPO's), with gradient
    s_i = min(ρ_i Â_i, clip(ρ_i, 1 − ε, 1 + ε) Â_i)
    ℒ   = −(1/N) Σ_i w_i · s_i · keep_i                           the loss

Advantages, N, the skipped zero-variance groups, keep_i and the filter's rules ("or": drop an off-policy
completion when Â_i ≤ 0 or D_i > g; "and": when both hold) are the per-token form's (``variants.py``).
The choices of each variant are the per-token ones, made per sequence:

| variant | ratio ρ_i, to the power 1/L_i | weight w_i                              | filter |
|---------|-------------------------------|-----------------------------------------|--------|
| nois    | π_θ(y) / π_θold(y)            | 1                                       | no     |
| vis     | π_θ(y) / π_gen(y)             | 1                                       | no     |
| tis     | π_θ(y) / π_θold(y)            | min((π_θold(y) / π_gen(y))^(1/L), C)    | no     |
| ftis    | π_θ(y) / π_θold(y)            | min((π_θold(y) / π_gen(y))^(1/L), C)    | yes    |
| fvis    | π_θ(y) / π_gen(y)             | 1                                       | yes    |

When this node's tokens are the generator's, log π_gen(y) = Σ_t sampler_t, and the sequence form is exactly the
per-token form run with each token's log-ratio log(π_θ/π_θold) and log-weight log(π_θold/π_gen) replaced by
their completion's means (tests/test_loss_sequence.py checks loss, gradient, filter and figures): the two agree
wherever those are constant within each completion. Where they vary, w_i is the geometric mean of the token
weights, truncated once (before truncation, at most their arithmetic mean), and D_i = k3(mean x) is at most
the per-token mean of k3(x) (k3 is convex).
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from ftis.node.loss.advantages import active_completions
from ftis.node.loss.choices import variants
from ftis.node.loss.terms import (
    MAX_LOG_RATIO,
    FilterDecision,
    clipped_surrogate,
    loss_figures,
    lowest_window_mean,
    masked_mean_per_sequence,
)
from ftis.node.loss.types import LossOutputs, LossParams, SequenceLossInputs

# The range of x̄ that k3 reads. A peer's claim is any finite number, and k3(x) overflows float32 above
# x ≈ 88 (and a batch's sum of huge D would too): capped, D stays finite. k3(20) ≈ 4.9e8 and
# k3(−1e4) ≈ 1e4 lie beyond any threshold g one would set, so the filter's decisions do not change.
K3_LOG_RATIO_RANGE = (-1e4, MAX_LOG_RATIO)


@dataclass(frozen=True)
class _Sequences:
    """The inputs made safe (float32, padding and empty completions selected away), one row per completion."""

    logprobs: Tensor  # (B,) log π_θ(y) / L, with gradient
    old_logprobs: Tensor  # (B,) log π_θold(y) / L
    sampler_logprobs: Tensor  # (B,) log π_gen(y) / L
    mask: Tensor  # (B, T) bool, this node's completion tokens
    advantages: Tensor  # (B,)
    active: Tensor  # (B,) bool
    eligible: Tensor  # (B,) bool, active completions the filter applies to
    divergence: Tensor  # (B,) D_i
    lowest_window: Tensor  # (B,) the lowest mean of log π_θold over surprise_window of this node's tokens
    zero_variance_groups: Tensor  # ()

    @property
    def positions(self) -> Tensor:  # where a log-ratio exists: the completions with a token to score
        return self.active


def sequence_k3_divergence(sampler_logprobs: Tensor, old_logprobs: Tensor) -> Tensor:
    """D_i = k3(x̄_i), x̄_i = sampler_i − old_i (both per-token means, (B,)), x̄ capped to K3_LOG_RATIO_RANGE.

    k3 is convex, so k3 of the mean is at most the per-token form's mean of k3 (Jensen): on one tokenizer
    it misses the divergence that cancels within a completion, and the same g filters less.
    """
    x = (sampler_logprobs - old_logprobs).detach().clamp(*K3_LOG_RATIO_RANGE)  # (B,)
    return torch.expm1(x) - x


def _prepare(inputs: SequenceLossInputs, params: LossParams) -> _Sequences:
    mask = inputs.loss_mask.bool()
    lengths = mask.sum(-1)  # (B,) L_i: this node's tokens, never the peer's count
    has_tokens = lengths > 0

    def per_token_mean(values: Tensor) -> Tensor:  # padding may hold NaN/-inf: select, never multiply
        return masked_mean_per_sequence(torch.where(mask, values.float(), 0.0), mask)

    old = per_token_mean(inputs.old_logprobs.detach())
    claimed = torch.where(has_tokens, inputs.sampler_sequence_logprobs.detach().float(), 0.0)  # (B,)
    sampler = claimed / lengths.clamp(min=1)
    completions = active_completions(inputs.rewards, inputs.group_ids, inputs.off_policy, has_tokens,
                                     params.advantage_norm, inputs.advantages)
    return _Sequences(
        logprobs=per_token_mean(inputs.logprobs),
        old_logprobs=old,
        sampler_logprobs=sampler,
        mask=mask,
        divergence=sequence_k3_divergence(sampler, old),
        lowest_window=lowest_window_mean(torch.where(mask, inputs.old_logprobs.detach().float(), 0.0), mask,
                                         params.surprise_window),
        **completions.__dict__,  # advantages, active, eligible, zero_variance_groups
    )


def _finish(
    sequences: _Sequences,
    params: LossParams,
    *,
    ratio_base: Tensor,
    weight: Tensor,
    reported_weight: Tensor,
    truncated: Tensor,
    decision: FilterDecision,
) -> LossOutputs:
    """The shared tail: sequence surrogate, weight, keep, batch mean, figures (weights counted per token)."""
    keep = sequences.active & ~decision.dropped  # (B,)
    # The surrogate caps log ρ before exp() (terms.py), so an absurd claim under vis stays finite; dropped and
    # inactive completions are then selected away, never multiplied by 0 (inf · 0 would be NaN).
    surrogate = weight * clipped_surrogate(sequences.logprobs - ratio_base, sequences.advantages, params.epsilon)
    loss = -torch.where(keep, surrogate, 0.0).sum() / sequences.active.sum().clamp(min=1)
    per_token = sequences.mask.shape
    figures = loss_figures(sequences.mask, sequences.active, sequences.eligible, sequences.divergence,
                           sequences.zero_variance_groups, reported_weight[:, None].expand(per_token),
                           truncated[:, None].expand(per_token), decision)
    return LossOutputs(loss, figures, decision.by_divergence, decision.implausible)


SEQUENCE_VARIANTS: dict[str, Callable[[SequenceLossInputs, LossParams], LossOutputs]] = variants(_prepare, _finish)
