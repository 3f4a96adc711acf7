"""Groups -> the padded tensors one forward pass and the loss need.

Each completion becomes one right-padded row ``prompt ids + completion ids + padding``. The logit
at position ``p + j − 1`` predicts completion token ``j`` (``p`` = prompt length), so
``target_index[i, j]`` says where to read token ``j``'s log-prob in row ``i``. ``group_index`` numbers
the advantage groups: one per group, except that groups sharing an ``advantage_key`` (horizontal mode)
share a number, and micro-batches keep them together.

A micro-batch is trained per token or per sequence (``TrainingGroup.per_sequence``), never both: an advantage
group holding a group of another tokenizer is trained per sequence whole (its groups in this node's tokens with
their sampler log-probs summed), so its advantages stay over all of its completions.
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
    sampler_sequence_logprobs: Tensor  # (B,) float32 log π_gen(y) of each completion (``sampler_sums``)


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
        sampler_sequence_logprobs=torch.from_numpy(
            np.concatenate([group.sampler_sums() for group in groups]).astype(np.float32)),
    )


def _spans(lengths: np.ndarray) -> list[tuple[int, int]]:
    ends = np.cumsum(lengths).tolist()
    return [(end - int(length), int(length)) for end, length in zip(ends, lengths.tolist(), strict=True)]


@dataclass(frozen=True)
class MicroBatch:
    groups: list[TrainingGroup]
    per_sequence: bool  # trained with the per-sequence loss (another tokenizer's group is in each advantage group)


def micro_batches(groups: list[TrainingGroup], max_tokens: int) -> list[MicroBatch]:
    """Runs of whole advantage groups (advantages are per advantage group: the groups sharing an
    ``advantage_key`` go together, in order of first appearance) of at most ``max_tokens`` padded tokens
    each; an advantage group larger than that forms a micro-batch alone. The advantage groups trained per token
    come first, then those trained per sequence."""
    gathered = advantage_groups(groups)
    batches: list[MicroBatch] = []
    for per_sequence in (False, True):
        current: list[TrainingGroup] = []
        for together in gathered:
            if any(group.per_sequence for group in together) != per_sequence:
                continue
            if current and _padded_tokens([*current, *together]) > max_tokens:
                batches.append(MicroBatch(current, per_sequence))
                current = []
            current.extend(together)
        if current:
            batches.append(MicroBatch(current, per_sequence))
    return batches


def _padded_tokens(groups: list[TrainingGroup]) -> int:
    rows = sum(group.size for group in groups)
    width = max(len(g.prompt_ids) + int(g.completions.lengths.max()) for g in groups)
    return rows * width
