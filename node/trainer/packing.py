"""Groups -> the padded tensors one micro-batch's forward pass and the loss need, in two layouts.

Rows: each completion is one right-padded row ``prompt ids + completion ids + padding``. The logit at
position ``p + j − 1`` predicts completion token ``j`` (``p`` = prompt length), so ``target_index[i, j]``
says where to read token ``j``'s log-prob in row ``i``. Every model runs this layout; it computes a group's
prompt once per completion.

Shared prompts: the micro-batch's distinct prompts once (``prompt_ids``, left-padded, so that each prompt's
last token sits in the last column and the completions continue it), and each row's completion alone
(``completion_ids``), which names its prompt by ``prompt_index``. ``logprobs.py`` prefills the prompts into a
KV cache and runs the completions on it: with a few-shot prompt of a few hundred tokens and completions of a
few dozen, the rows layout spends most of its work and activation memory on G copies of the prompt. The
completions run in ``buckets`` of rows of similar length (``length_buckets``), each padded only to its own
longest: sampled lengths spread widely (a few run to ``max_new_tokens``, most stop early), and one pass padded
to the longest would compute mostly padding. The tokens every distinct prompt starts with (an instruction and its
solved examples, the same for every problem of a task) are counted once more: ``prompt_prefix`` of them
(``shared_prefix``), which ``logprobs.py`` runs once for the whole micro-batch. ``micro_batches`` counts a
micro-batch's tokens in the layout the trainer runs (``padded_tokens``).

``group_index`` numbers the advantage groups: one per group, except that groups sharing an ``advantage_key``
(horizontal mode) share a number. A micro-batch holds whole advantage groups while they fit in
``max_tokens``; one that does not fit alone is split into parts of its rows, each a micro-batch of at most
``max_tokens`` (a single row longer than that is a part alone: what the intake admits bounds a row), so no
forward pass is larger than the setting allows, whatever a peer's group holds. Advantages are over each whole
advantage group (``TrainingGroup.advantages``, computed by the trainer before it packs), so a split changes
nothing in the loss. A micro-batch is trained per token or per sequence (``TrainingGroup.per_sequence``), never
both: an advantage group holding a group of another tokenizer is trained per sequence whole (its groups in this
node's tokens with their sampler log-probs summed).
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ftis.node.prompt_prefix import shared_prefix
from ftis.node.trainer.groups import TrainingGroup, advantage_index


@dataclass(frozen=True)
class PackedBatch:
    # rows layout
    input_ids: Tensor  # (B, L) int64, right-padded
    attention_mask: Tensor  # (B, L) int64
    target_index: Tensor  # (B, T) int64, logit position of completion token j (0 on padding)
    # shared-prompts layout
    prompt_ids: Tensor  # (Q, P) int64, the distinct prompts, left-padded
    prompt_mask: Tensor  # (Q, P) int64
    prompt_index: Tensor  # (B,) int64, each row's prompt (0..Q-1)
    buckets: tuple[Tensor, ...]  # row indices (int64) of each completion pass, longest completions first
    prompt_prefix: int  # how many first tokens every distinct prompt shares (``shared_prefix``; 0: none worth it)
    # both
    completion_ids: Tensor  # (B, T) int64
    loss_mask: Tensor  # (B, T) bool
    sampler_logprobs: Tensor  # (B, T) float32
    rewards: Tensor  # (B,) float32
    group_index: Tensor  # (B,) int64, the advantage group each row belongs to (0..K-1 in this batch)
    off_policy: Tensor  # (B,) bool
    temperature: Tensor  # (B,) float32
    sampler_sequence_logprobs: Tensor  # (B,) float32 log π_gen(y) of each completion (``sampler_sums``)
    advantages: Tensor | None = None  # (B,) float32 Â over each whole advantage group, where every group has them


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
    prompts, prompt_index = _distinct_prompts(groups)
    prompt_ids, prompt_mask = left_padded(prompts, pad_id)
    return PackedBatch(
        input_ids=torch.from_numpy(input_ids),
        attention_mask=torch.from_numpy(attention),
        target_index=torch.from_numpy(target_index),
        prompt_ids=torch.from_numpy(prompt_ids),
        prompt_mask=torch.from_numpy(prompt_mask),
        prompt_index=torch.tensor([prompt_index[k] for k, group in enumerate(groups) for _ in range(group.size)],
                                  dtype=torch.int64),
        buckets=tuple(torch.tensor(rows, dtype=torch.int64) for rows in length_buckets(lengths)),
        prompt_prefix=shared_prefix(prompts),
        completion_ids=torch.from_numpy(completion_ids),
        loss_mask=torch.from_numpy(loss_mask),
        sampler_logprobs=torch.from_numpy(sampler),
        rewards=torch.tensor([float(group.rewards[c]) for _, group, _, _, c in rows], dtype=torch.float32),
        group_index=torch.tensor([g for g, *_ in rows], dtype=torch.int64),
        off_policy=torch.tensor([group.off_policy for _, group, *_ in rows], dtype=torch.bool),
        temperature=torch.tensor([group.temperature for _, group, *_ in rows], dtype=torch.float32),
        sampler_sequence_logprobs=torch.from_numpy(
            np.concatenate([group.sampler_sums() for group in groups]).astype(np.float32)),
        advantages=(torch.from_numpy(np.concatenate([group.advantages for group in groups]).astype(np.float32))
                    if all(group.advantages is not None for group in groups) else None),
    )


def _spans(lengths: np.ndarray) -> list[tuple[int, int]]:
    ends = np.cumsum(lengths).tolist()
    return [(end - int(length), int(length)) for end, length in zip(ends, lengths.tolist(), strict=True)]


def _distinct_prompts(groups: list[TrainingGroup]) -> tuple[list[np.ndarray], list[int]]:
    """The groups' prompts, each once (horizontal mode's groups of one advantage group share theirs), and each
    group's number among them."""
    numbers: dict[bytes, int] = {}
    prompts: list[np.ndarray] = []
    for group in groups:
        key = np.asarray(group.prompt_ids, np.int64).tobytes()
        if key not in numbers:
            numbers[key] = len(prompts)
            prompts.append(np.asarray(group.prompt_ids, np.int64))
    return prompts, [numbers[np.asarray(group.prompt_ids, np.int64).tobytes()] for group in groups]


def left_padded(prompts: list[np.ndarray], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, attention mask), both (P, width) int64, padding on the left (as the generator pads its prompts)."""
    width = max(len(p) for p in prompts)
    ids = np.full((len(prompts), width), pad_id, np.int64)
    mask = np.zeros((len(prompts), width), np.int64)
    for k, prompt in enumerate(prompts):
        ids[k, width - len(prompt) :] = prompt
        mask[k, width - len(prompt) :] = 1
    return ids, mask


@dataclass(frozen=True)
class MicroBatch:
    groups: list[TrainingGroup]
    per_sequence: bool  # trained with the per-sequence loss (another tokenizer's group is in each advantage group)


def micro_batches(gathered: list[list[TrainingGroup]], max_tokens: int,
                  shared_prompts: bool = True) -> list[MicroBatch]:
    """Runs of whole advantage groups (``gathered``, as ``groups.advantage_groups`` gives them) of at most
    ``max_tokens`` padded tokens each (``padded_tokens``, in the layout named by ``shared_prompts``); an advantage
    group larger than that alone is split into parts of its rows (``split_rows``: its groups must carry their
    ``advantages``). The advantage groups trained per token come first, then those trained per sequence."""
    batches: list[MicroBatch] = []
    for per_sequence in (False, True):
        current: list[TrainingGroup] = []
        for together in gathered:
            if any(group.per_sequence for group in together) != per_sequence:
                continue
            if current and padded_tokens([*current, *together], shared_prompts) <= max_tokens:
                current.extend(together)
                continue
            if current:
                batches.append(MicroBatch(current, per_sequence))
            parts = ([list(together)] if padded_tokens(together, shared_prompts) <= max_tokens
                     else split_rows(together, max_tokens, shared_prompts))
            batches.extend(MicroBatch(part, per_sequence) for part in parts[:-1])
            current = parts[-1]
        if current:
            batches.append(MicroBatch(current, per_sequence))
    return batches


def split_rows(together: list[TrainingGroup], max_tokens: int,
               shared_prompts: bool = True) -> list[list[TrainingGroup]]:
    """One advantage group's completions, in order, in parts of as many rows as fit in ``max_tokens`` padded tokens
    (a row that does not fit alone is a part alone). Each part is a list of groups of some of the rows
    (``TrainingGroup.rows``), which keep the advantages computed over the whole."""
    if any(group.advantages is None for group in together):
        raise ValueError("an advantage group split across micro-batches needs its advantages computed over the whole")
    parts: list[list[TrainingGroup]] = []
    spans: list[tuple[TrainingGroup, int, int]] = []  # the part being filled: (group, first row, row after the last)
    for group in together:
        for row in range(group.size):
            grown = _grown(spans, group, row)
            if spans and padded_tokens(_rows_of(grown), shared_prompts) > max_tokens:
                parts.append(_rows_of(spans))
                grown = [(group, row, row + 1)]
            spans = grown
    parts.append(_rows_of(spans))
    return parts


def _grown(spans: list[tuple[TrainingGroup, int, int]], group: TrainingGroup,
           row: int) -> list[tuple[TrainingGroup, int, int]]:
    if spans and spans[-1][0] is group and spans[-1][2] == row:
        return [*spans[:-1], (group, spans[-1][1], row + 1)]
    return [*spans, (group, row, row + 1)]


def _rows_of(spans: list[tuple[TrainingGroup, int, int]]) -> list[TrainingGroup]:
    return [group.rows(start, stop) for group, start, stop in spans]


def padded_tokens(groups: list[TrainingGroup], shared_prompts: bool = True) -> int:
    """Tokens one forward pass over ``groups`` computes, padding included: rows × (prompt + completion) in the
    rows layout; with shared prompts, their shared prefix once, the rest of each distinct prompt once, and each
    bucket's rows × its longest completion."""
    rows = sum(group.size for group in groups)
    if not shared_prompts:
        return rows * max(len(g.prompt_ids) + int(g.completions.lengths.max(initial=0)) for g in groups)
    prompts, _ = _distinct_prompts(groups)
    prefix = shared_prefix(prompts)
    lengths = np.concatenate([g.completions.lengths for g in groups]).tolist()
    return prefix + len(prompts) * (max(len(p) for p in prompts) - prefix) + sum(
        len(rows) * lengths[rows[0]] for rows in length_buckets(lengths))


def length_buckets(lengths: list[int]) -> list[list[int]]:
    """Rows (indices into ``lengths``) in runs of similar length, longest first: a run ends before a row shorter
    than half its longest, so a run's padding is under half its tokens, and there are at most
    log2(longest) + 2 runs."""
    buckets: list[list[int]] = []
    for row in sorted(range(len(lengths)), key=lambda r: (-lengths[r], r)):
        if not buckets or 2 * lengths[row] < lengths[buckets[-1][0]]:
            buckets.append([])
        buckets[-1].append(row)
    return buckets
