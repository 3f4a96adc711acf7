"""Groups -> the padded tensors one forward pass and the loss need.

Each completion becomes one right-padded row ``prompt ids + completion ids + padding``. The logit
at position ``p + j − 1`` predicts completion token ``j`` (``p`` = prompt length), so
``target_index[i, j]`` says where to read token ``j``'s log-prob in row ``i``. ``group_index`` numbers
the advantage groups: one per group, except that groups sharing an ``advantage_key`` (horizontal mode)
share a number, and micro-batches keep them together.
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ftis.node.trainer.groups import TrainingGroup, advantage_groups, advantage_index


@dataclass(frozen=True)
class PackedBatch:
    input_ids: Tensor  # (B, L) int64, right-padded
    attention_mask: Tensor  # (B, L) int64
    target_index: Tensor  # (B, T) int64, logit position of completion token j (0 on padding)
    completion_ids: Tensor  # (B, T) int64
    loss_mask: Tensor  # (B, T) bool
    sampler_logprobs: Tensor  # (B, T) float32
    rewards: Tensor  # (B,) float32
    group_index: Tensor  # (B,) int64, the advantage group each row belongs to (0..K-1 in this batch)
    off_policy: Tensor  # (B,) bool
    temperature: Tensor  # (B,) float32


def pack(groups: list[TrainingGroup], pad_id: int = 0) -> PackedBatch:
    rows = [
        (g, group, group.completions.token_ids[start : start + length],
         group.completions.sampler_logprobs[start : start + length], c)
        for g, group in zip(advantage_index(groups), groups, strict=True)
        for c, (start, length) in enumerate(_spans(group.completions.lengths))
    ]
    prompt_lengths = [len(group.prompt_ids) for _, group, *_ in rows]
    lengths = [len(ids) for _, _, ids, _, _ in rows]
    width = max(p + t for p, t in zip(prompt_lengths, lengths, strict=True))
    span = max(lengths)
    batch = len(rows)
    input_ids = np.full((batch, width), pad_id, np.int64)
    attention = np.zeros((batch, width), np.int64)
    completion_ids = np.zeros((batch, span), np.int64)
    target_index = np.zeros((batch, span), np.int64)
    loss_mask = np.zeros((batch, span), bool)
    sampler = np.zeros((batch, span), np.float32)
    for i, (_, group, ids, logprobs, _) in enumerate(rows):
        p, t = len(group.prompt_ids), len(ids)
        input_ids[i, :p] = group.prompt_ids
        input_ids[i, p : p + t] = ids
        attention[i, : p + t] = 1
        completion_ids[i, :t] = ids
        target_index[i, :t] = np.arange(p - 1, p + t - 1)
        loss_mask[i, :t] = True
        sampler[i, :t] = logprobs
    return PackedBatch(
        input_ids=torch.from_numpy(input_ids),
        attention_mask=torch.from_numpy(attention),
        target_index=torch.from_numpy(target_index),
        completion_ids=torch.from_numpy(completion_ids),
        loss_mask=torch.from_numpy(loss_mask),
        sampler_logprobs=torch.from_numpy(sampler),
        rewards=torch.tensor([float(group.rewards[c]) for _, group, _, _, c in rows], dtype=torch.float32),
        group_index=torch.tensor([g for g, *_ in rows], dtype=torch.int64),
        off_policy=torch.tensor([group.off_policy for _, group, *_ in rows], dtype=torch.bool),
        temperature=torch.tensor([group.temperature for _, group, *_ in rows], dtype=torch.float32),
    )


def _spans(lengths: np.ndarray) -> list[tuple[int, int]]:
    ends = np.cumsum(lengths).tolist()
    return [(end - int(length), int(length)) for end, length in zip(ends, lengths.tolist(), strict=True)]


def micro_batches(groups: list[TrainingGroup], max_tokens: int) -> list[list[TrainingGroup]]:
    """Runs of whole advantage groups (advantages are per advantage group: the groups sharing an
    ``advantage_key`` go together, in order of first appearance) of at most ``max_tokens`` padded tokens
    each; an advantage group larger than that forms a micro-batch alone."""
    batches: list[list[TrainingGroup]] = []
    current: list[TrainingGroup] = []
    for gathered in advantage_groups(groups):
        if current and _padded_tokens([*current, *gathered]) > max_tokens:
            batches.append(current)
            current = []
        current.extend(gathered)
    if current:
        batches.append(current)
    return batches


def _padded_tokens(groups: list[TrainingGroup]) -> int:
    rows = sum(group.size for group in groups)
    width = max(len(g.prompt_ids) + int(g.completions.lengths.max()) for g in groups)
    return rows * width
