"""The three choices that make each of the five variants, written once for both granularities.

A variant is a ratio in the surrogate (to π_θold or to π_gen), a weight (1 or the truncated IS weight) and
whether the off-policy filter applies (docs/loss.md; the tables in ``variants.py`` and ``sequence.py``). What
differs between per token and per sequence is how the inputs are made safe (``prepare``) and how the shared tail
averages (``finish``); ``variants(prepare, finish)`` makes the five functions of one granularity from those two.
"""

from collections.abc import Callable
from typing import Protocol, TypeVar

import torch
from torch import Tensor

from ftis.node.loss.terms import (
    MAX_LOG_RATIO,
    FilterDecision,
    offpolicy_filter,
    plausibility_filter,
    truncated_is_weight,
)
from ftis.node.loss.types import LossOutputs, LossParams


class Prepared(Protocol):
    """The inputs made safe, at one granularity: (B, T) per token, (B,) per sequence for the log-probs."""

    @property
    def logprobs(self) -> Tensor: ...  # log π_θ, with gradient
    @property
    def old_logprobs(self) -> Tensor: ...  # log π_θold, detached
    @property
    def sampler_logprobs(self) -> Tensor: ...  # log π_gen, detached
    @property
    def positions(self) -> Tensor: ...  # bool, the log-probs' shape: where a log-ratio exists
    @property
    def advantages(self) -> Tensor: ...  # (B,)
    @property
    def active(self) -> Tensor: ...  # (B,) bool, completions that enter the mean
    @property
    def eligible(self) -> Tensor: ...  # (B,) bool, active completions the filter applies to
    @property
    def divergence(self) -> Tensor: ...  # (B,) D_i
    @property
    def lowest_window(self) -> Tensor: ...  # (B,) the lowest mean of log π_θold over a window of its tokens


P = TypeVar("P", bound=Prepared)
P_contra = TypeVar("P_contra", bound=Prepared, contravariant=True)
Inputs = TypeVar("Inputs")


class Finish(Protocol[P_contra]):
    """The shared tail of one granularity: surrogate, weight, keep, means, figures."""

    def __call__(self, prepared: P_contra, params: LossParams, /, *, ratio_base: Tensor, weight: Tensor,
                 reported_weight: Tensor, truncated: Tensor, decision: FilterDecision) -> LossOutputs: ...


def no_filter(prepared: Prepared) -> FilterDecision:
    nothing = torch.zeros_like(prepared.active)
    return FilterDecision(nothing, nothing, nothing, nothing)


def divergence_filter(prepared: Prepared, params: LossParams) -> FilterDecision:
    return offpolicy_filter(prepared.advantages, prepared.divergence, prepared.eligible,
                            params.divergence_threshold, params.filter_rule)


def variants(prepare: Callable[[Inputs, LossParams], P],
             finish: Finish[P]) -> dict[str, Callable[[Inputs, LossParams], LossOutputs]]:
    """``nois``, ``vis``, ``tis``, ``ftis``, ``fvis`` at the granularity ``prepare`` and ``finish`` make. Each
    drops, beside what its own filter does, the off-policy completions this node finds implausible
    (``LossParams.max_surprise``; none when it is inf)."""

    def guarded(prepared: P, params: LossParams, /, *, ratio_base: Tensor, weight: Tensor, reported_weight: Tensor,
                truncated: Tensor, decision: FilterDecision) -> LossOutputs:
        decision = plausibility_filter(decision, prepared.lowest_window, prepared.eligible, params.max_surprise)
        return finish(prepared, params, ratio_base=ratio_base, weight=weight, reported_weight=reported_weight,
                      truncated=truncated, decision=decision)

    def nois(inputs: Inputs, params: LossParams) -> LossOutputs:
        """No correction: every sample is treated as on-policy (w = 1, ratio to π_θold)."""
        prepared = prepare(inputs, params)
        ones = torch.ones_like(prepared.old_logprobs)
        return guarded(prepared, params, ratio_base=prepared.old_logprobs, weight=ones, reported_weight=ones,
                      truncated=torch.zeros_like(prepared.positions), decision=no_filter(prepared))

    def vis_with(prepared: P, params: LossParams, decision: FilterDecision) -> LossOutputs:
        """The ratio to π_gen (with gradient), PPO-clipped, never truncated; w = 1. The reported IS weight is that
        ratio, detached (at most exp(MAX_LOG_RATIO), as in the surrogate)."""
        log_ratio = torch.where(prepared.positions, prepared.logprobs.detach() - prepared.sampler_logprobs, 0.0)
        ratio = torch.exp(log_ratio.clamp(max=MAX_LOG_RATIO))
        return guarded(prepared, params, ratio_base=prepared.sampler_logprobs, weight=torch.ones_like(ratio),
                      reported_weight=ratio, truncated=torch.zeros_like(prepared.positions), decision=decision)

    def tis_with(prepared: P, params: LossParams, decision: FilterDecision) -> LossOutputs:
        """w = min(π_θold / π_gen, C), detached, times the PPO surrogate against π_θold."""
        weight, truncated = truncated_is_weight(prepared.old_logprobs, prepared.sampler_logprobs, params.clip_c)
        return guarded(prepared, params, ratio_base=prepared.old_logprobs, weight=weight, reported_weight=weight,
                      truncated=truncated, decision=decision)

    def vis(inputs: Inputs, params: LossParams) -> LossOutputs:
        """Vanilla IS: the PPO ratio to the generator's policy instead of π_θold, no truncation."""
        prepared = prepare(inputs, params)
        return vis_with(prepared, params, no_filter(prepared))

    def tis(inputs: Inputs, params: LossParams) -> LossOutputs:
        """Truncated IS, applied to every completion, without the filter."""
        prepared = prepare(inputs, params)
        return tis_with(prepared, params, no_filter(prepared))

    def ftis(inputs: Inputs, params: LossParams) -> LossOutputs:
        """F-TIS: TIS plus the filter on off-policy completions (the default)."""
        prepared = prepare(inputs, params)
        return tis_with(prepared, params, divergence_filter(prepared, params))

    def fvis(inputs: Inputs, params: LossParams) -> LossOutputs:
        """VIS plus the filter on off-policy completions."""
        prepared = prepare(inputs, params)
        return vis_with(prepared, params, divergence_filter(prepared, params))

    return {"nois": nois, "vis": vis, "tis": tis, "ftis": ftis, "fvis": fvis}

