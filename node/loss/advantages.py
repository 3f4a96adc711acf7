"""Vertical group advantages: Â_i = (r_i − mean(r)) / (std(r) + 1e-6) over the whole group.

The group is every completion sharing a ``group_id``, including the ones the filter will drop
(docs/loss.md). ``std`` is the sample standard deviation (Bessel's correction), as ``torch.std`` and
TRL's GRPO compute it. A group whose rewards are all equal teaches nothing and is skipped; a group
of one completion is such a group.
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from ftis.node.loss.types import AdvantageNorm

STD_EPS = 1e-6


@dataclass(frozen=True)
class GroupAdvantages:
    advantages: Tensor  # (B,) Â_i; 0 in skipped groups
    informative: Tensor  # (B,) bool, False for completions of zero-variance groups
    zero_variance_groups: Tensor  # () int64, how many groups were skipped


def group_advantages(rewards: Tensor, group_ids: Tensor, norm: AdvantageNorm = "std") -> GroupAdvantages:
    rewards = rewards.detach().to(torch.float64)  # rewards carry no gradient; float64 keeps r - mean exact
    _, index = torch.unique(group_ids, return_inverse=True)  # (B,) group index 0..K-1
    num_groups = int(index.max()) + 1 if index.numel() else 0
    counts = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, index, torch.ones_like(rewards))
    sums = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, index, rewards)
    mean = sums / counts  # (K,)
    centered = rewards - mean[index]  # (B,)
    highest = torch.full((num_groups,), -torch.inf, dtype=torch.float64).scatter_reduce(0, index, rewards, "amax")
    lowest = torch.full((num_groups,), torch.inf, dtype=torch.float64).scatter_reduce(0, index, rewards, "amin")
    varied = highest > lowest  # (K,) exact comparison: equal rewards are exactly equal
    if norm == "std":
        squares = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, index, centered**2)
        std = torch.sqrt(squares / (counts - 1).clamp(min=1))  # (K,) sample std
        centered = centered / (std[index] + STD_EPS)
    elif norm != "mean_only":
        raise ValueError(f"advantage_norm must be 'std' or 'mean_only', got {norm!r}")
    informative = varied[index]
    advantages = torch.where(informative, centered, 0.0).to(torch.float32)
    return GroupAdvantages(advantages, informative, (~varied).sum())


@dataclass(frozen=True)
class ActiveCompletions:
    """Which completions enter a loss, and their advantages: the same at both granularities."""

    advantages: Tensor  # (B,) Â_i; 0 in skipped groups
    active: Tensor  # (B,) bool: in a group with reward variance, and with at least one token
    eligible: Tensor  # (B,) bool: the active completions the filter applies to (off-policy)
    zero_variance_groups: Tensor  # () int64


def active_completions(rewards: Tensor, group_ids: Tensor, off_policy: Tensor, has_tokens: Tensor,
                       norm: AdvantageNorm, advantages: Tensor | None = None) -> ActiveCompletions:
    """``advantages``: (B,) Â computed beforehand over whole groups with reward variance (a group split across
    micro-batches); None: computed here, over the groups ``group_ids`` names."""
    if advantages is None:
        groups = group_advantages(rewards, group_ids, norm)
    else:
        groups = GroupAdvantages(advantages.detach().to(torch.float32), torch.ones_like(has_tokens, dtype=torch.bool),
                                 torch.zeros((), dtype=torch.int64))
    active = groups.informative & has_tokens
    return ActiveCompletions(groups.advantages, active, active & off_policy.bool(), groups.zero_variance_groups)
