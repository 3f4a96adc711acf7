"""The building blocks of every loss variant (docs/loss.md), each a pure function over tensors.

Callers pass log-prob tensors already zeroed at padded positions (``variants.py`` does that first),
so no NaN or inf from padding can reach a value or a gradient here. Both granularities use them: per
token (``variants.py``) and per sequence (``sequence.py``, where a (B,) tensor stands in for a (B, T) one).
"""

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ftis.node.loss.types import FilterRule, LossFigures

# The largest log-ratio log R_t the surrogate takes, on its side that no PPO clip bounds (R above 1 + ε with
# Â < 0). exp(20) ≈ 4.9e8 is far beyond any ratio an honest sample reaches, and far below float32's
# overflow (exp(88.7)): a peer's absurd sampler log-prob under ``vis`` cannot turn the loss into inf and
# every weight into NaN. Beyond it the surrogate is flat (no gradient), as it is beyond the PPO clip.
MAX_LOG_RATIO = 20.0


def masked_mean_per_sequence(values: Tensor, mask: Tensor) -> Tensor:
    """(B, T) -> (B,): mean over each row's masked tokens; 0 for a row with none."""
    lengths = mask.sum(-1)  # (B,)
    sums = torch.where(mask, values, 0.0).sum(-1)  # (B,)
    return sums / lengths.clamp(min=1)


def truncated_is_weight(old_logprobs: Tensor, sampler_logprobs: Tensor, clip_c: float) -> tuple[Tensor, Tensor]:
    """w_t = min(exp(old_t − sampler_t), C), and where the truncation bit; both (B, T), no gradient.

    The weight changes the measure the samples were drawn from, not the objective, so it is
    detached: no gradient flows through it. It is computed in log space and capped before the
    exponential, so a peer's absurd log-prob cannot overflow it (unless C is infinite).
    """
    log_ratio = (old_logprobs - sampler_logprobs).detach()  # (B, T)
    log_c = math.log(clip_c) if clip_c > 0 else -math.inf
    truncated = log_ratio > log_c
    return torch.exp(log_ratio.clamp(max=log_c)), truncated


def k3_divergence(sampler_logprobs: Tensor, old_logprobs: Tensor, mask: Tensor) -> Tensor:
    """D_i = masked mean over completion i's tokens of k3(x) = exp(x) − x − 1, x = sampler_t − old_t.

    An estimate of how far this node's policy is from the generator's on this completion; (B,),
    no gradient, 0 for a completion with no tokens.
    """
    x = (sampler_logprobs - old_logprobs).detach()  # (B, T)
    return masked_mean_per_sequence(torch.expm1(x) - x, mask)


def lowest_window_mean(logprobs: Tensor, mask: Tensor, window: int) -> Tensor:
    """(B, T) -> (B,): the lowest mean of ``window`` consecutive completion tokens' log-probs in each row; +inf in a
    row of fewer tokens (too short to carry a run: a bare answer). Completion tokens come first in a row, padding
    after (``types.py``); no gradient."""
    values = torch.where(mask, logprobs.detach().float(), 0.0)
    lengths = mask.sum(-1)  # (B,)
    width = values.shape[-1]
    if window < 1 or width < window:
        return torch.full_like(values[:, 0], math.inf)
    sums = torch.nn.functional.pad(values.cumsum(-1), (1, 0))  # (B, T + 1): sums[:, t] = Σ of the first t
    window_means = (sums[:, window:] - sums[:, :-window]) / window  # (B, T − window + 1), by first token
    starts = torch.arange(window_means.shape[-1], device=values.device)
    whole = starts[None, :] + window <= lengths[:, None]  # windows inside the completion
    return torch.where(whole, window_means, math.inf).amin(-1)


@dataclass(frozen=True)
class FilterDecision:
    dropped: Tensor  # (B,) bool, keep_i = 0
    by_advantage: Tensor  # (B,) bool, dropped and Â_i ≤ 0
    by_divergence: Tensor  # (B,) bool, dropped and D_i > g
    implausible: Tensor  # (B,) bool, dropped, a run of its tokens too surprising to this node


def plausibility_filter(decision: FilterDecision, lowest: Tensor, eligible: Tensor,
                        max_surprise: float) -> FilterDecision:
    """``decision`` with the eligible completions whose ``lowest`` window mean of this node's log-probs is below
    −``max_surprise`` dropped too, whatever the variant: text this node finds implausible (a phrase no answer needs,
    say) is not trained on, however plausible its generator claims it is."""
    implausible = eligible & (lowest < -max_surprise)
    return FilterDecision(decision.dropped | implausible, decision.by_advantage, decision.by_divergence, implausible)


def offpolicy_filter(
    advantages: Tensor, divergence: Tensor, eligible: Tensor, threshold: float, rule: FilterRule
) -> FilterDecision:
    """Which eligible (off-policy) completions the filter drops.

    "or" (default, the seed's rule): drop when Â_i ≤ 0 or D_i > g.
    "and" (the released code's rule): drop when Â_i ≤ 0 and D_i > g.
    Completions that are not eligible (this node's fresh samples) are never dropped.
    """
    non_positive = advantages <= 0
    divergent = divergence > threshold
    if rule == "or":
        dropped = eligible & (non_positive | divergent)
    elif rule == "and":
        dropped = eligible & non_positive & divergent
    else:
        raise ValueError(f"filter_rule must be 'or' or 'and', got {rule!r}")
    return FilterDecision(dropped, dropped & non_positive, dropped & divergent, torch.zeros_like(dropped))


def clipped_surrogate(log_ratio: Tensor, advantages: Tensor, epsilon: float) -> Tensor:
    """s_t = min(R_t Â_i, clip(R_t, 1 − ε, 1 + ε) Â_i) with R_t = exp(log_ratio); (B, T), advantages (B, 1).

    Where the surrogate is flat in R (above 1 + ε for Â ≥ 0, below 1 − ε for Â ≤ 0) the log-ratio is
    clamped before the exponential: value and gradient are unchanged, and a peer's absurd log-prob
    cannot produce inf, whose product with a zero gradient would be NaN. On the side no clip bounds
    (Â < 0, R above 1 + ε) it is clamped at ``MAX_LOG_RATIO``: unchanged below it, flat beyond.
    """
    upper = torch.where(advantages >= 0, math.log1p(epsilon), MAX_LOG_RATIO)  # (B, 1)
    lower = torch.where(advantages <= 0, math.log1p(-epsilon), -math.inf)  # (B, 1)
    ratio = torch.exp(torch.clamp(log_ratio, min=lower, max=upper))
    return torch.minimum(ratio * advantages, ratio.clamp(1 - epsilon, 1 + epsilon) * advantages)


def loss_figures(
    mask: Tensor,
    active: Tensor,
    eligible: Tensor,
    divergence: Tensor,
    zero_variance_groups: Tensor,
    weight: Tensor,
    truncated: Tensor,
    decision: FilterDecision,
) -> LossFigures:
    """The figures every variant reports (``LossFigures``); ``weight`` and ``truncated`` are (B, T), per token
    (a per-sequence weight counts once for each of its completion's tokens)."""
    num_sequences = active.sum()
    tokens = mask & active[:, None]  # (B, T)
    num_tokens = tokens.sum().clamp(min=1)
    per_sequence = num_sequences.clamp(min=1)
    weight = weight.detach()
    return LossFigures(
        num_sequences=num_sequences,
        filtered_fraction=decision.dropped.sum() / per_sequence,
        filtered_advantage_fraction=decision.by_advantage.sum() / per_sequence,
        filtered_divergence_fraction=decision.by_divergence.sum() / per_sequence,
        filtered_implausible_fraction=decision.implausible.sum() / per_sequence,
        is_weight_mean=torch.where(tokens, weight, 0.0).sum() / num_tokens,
        is_weight_max=torch.where(tokens, weight, 0.0).amax() if weight.numel() else weight.new_zeros(()),
        truncated_fraction=(truncated & tokens).sum() / num_tokens,
        divergence_mean=torch.where(eligible, divergence, 0.0).sum() / eligible.sum().clamp(min=1),
        zero_variance_groups=zero_variance_groups,
    )
