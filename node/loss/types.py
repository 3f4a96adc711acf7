"""What the loss takes and returns.

Shapes: B completions, padded to T tokens. Position (i, t) is the t-th *completion* token of
completion i; prompt tokens are not in these tensors. ``loss_mask`` marks real tokens; padded
positions may hold anything (even NaN or -inf) and never reach a value or a gradient.
"""

from dataclasses import dataclass
from typing import Literal

from torch import Tensor

FilterRule = Literal["or", "and"]
AdvantageNorm = Literal["std", "mean_only"]


@dataclass(frozen=True)
class LossInputs:
    logprobs: Tensor  # (B, T) log π_θ(a_t | p∘a_<t), this node's model, carries the gradient
    old_logprobs: Tensor  # (B, T) log π_θold, this node's model before this optimisation step
    sampler_logprobs: Tensor  # (B, T) log π_gen, the generator's log-prob of the token it sampled
    loss_mask: Tensor  # (B, T) bool, True on completion tokens
    rewards: Tensor  # (B,) float, recomputed by this (the receiving) node
    group_ids: Tensor  # (B,) int64, completions with equal ids form one group
    off_policy: Tensor  # (B,) bool, the completions the filter applies to: peers' samples and this
    #                     node's stale ones (all of them when the node sets filter_local)
    # (B,) float Â_i computed over each whole group beforehand, where a group spans several calls (a trainer splits
    # a group too large for one forward pass): every row must then be of a group with reward variance. None:
    # computed here from ``rewards`` and ``group_ids``.
    advantages: Tensor | None = None


@dataclass(frozen=True)
class SequenceLossInputs:
    """A group whose generator used another tokenizer (``sequence.py``): this node re-tokenized the
    completion *text* with its own tokenizer, so the token axis is this node's, and the generator's
    log-prob comes as one number per completion. No per-token ``sampler_logprobs`` exist here."""

    logprobs: Tensor  # (B, T) log π_θ over this node's tokens of the completion text, carries the gradient
    old_logprobs: Tensor  # (B, T) log π_θold over the same tokens
    sampler_sequence_logprobs: Tensor  # (B,) log π_gen(y): the generator's sampler log-probs summed over its
    #                                    own tokens of the completion: the peer's claim (any finite value keeps
    #                                    the loss finite; NaN, ±inf and values above 0 are the decoder's to refuse)
    loss_mask: Tensor  # (B, T) bool, True on this node's completion tokens
    rewards: Tensor  # (B,) float, recomputed by this (the receiving) node
    group_ids: Tensor  # (B,) int64
    off_policy: Tensor  # (B,) bool, as in LossInputs (a peer's samples always are)
    advantages: Tensor | None = None  # (B,) as in LossInputs


@dataclass(frozen=True)
class LossParams:
    clip_c: float = 2.0  # C: TIS truncation of the weight exp(old - sampler); float("inf") disables it
    epsilon: float = 0.2  # ε: PPO clip range [1 - ε, 1 + ε] of the ratio
    divergence_threshold: float = 10.0  # g: an off-policy completion with D_i > g is filterable
    filter_rule: FilterRule = "or"  # "or": drop if Â ≤ 0 or D > g; "and": drop if Â ≤ 0 and D > g
    advantage_norm: AdvantageNorm = "std"  # "std": (r - mean) / (std + 1e-6); "mean_only": r - mean
    # an off-policy completion some ``surprise_window`` tokens in a row of which have a mean −log π_θold above this
    # is dropped, whatever its generator claims (inf: none is)
    max_surprise: float = 5.0
    surprise_window: int = 6


@dataclass(frozen=True)
class LossFigures:
    """Scalar tensors (detached). Fractions of completions are over the N active completions,
    fractions of tokens over their masked tokens; an empty set gives 0."""

    num_sequences: Tensor  # N: completions in informative groups with at least one token
    filtered_fraction: Tensor  # completions dropped by the filter
    filtered_advantage_fraction: Tensor  # dropped, and Â ≤ 0 held
    filtered_divergence_fraction: Tensor  # dropped, and D > g held
    filtered_implausible_fraction: Tensor  # dropped, and a run of its tokens is too surprising to this node
    is_weight_mean: Tensor  # the IS weight the variant applies (see each variant)
    is_weight_max: Tensor
    truncated_fraction: Tensor  # tokens whose weight exp(old - sampler) exceeded C
    divergence_mean: Tensor  # mean D_i over active off-policy completions
    zero_variance_groups: Tensor  # groups skipped because all their rewards were equal


@dataclass(frozen=True)
class LossOutputs:
    loss: Tensor  # () scalar, carries the gradient to ``logprobs``
    figures: LossFigures
    divergence_filtered: Tensor  # (B,) bool: dropped by the filter, and D_i > g (a trainer counts them per peer)
    implausible: Tensor  # (B,) bool: dropped, a run of its tokens too surprising (counted likewise)
