"""Rewards this node computes for a batch's groups, its own or a peer's (DESIGN §1, issue #4): the
completion text is decoded with this node's tokenizer (same fingerprint as the generator's, or the
batch was skipped earlier) and scored by this node's task against the gold answer it trusts. The
generator's reward in the batch is advisory and never used.

A peer may claim a larger vocabulary than this node's model has (same tokenizer fingerprint, another
embedding size, or a hostile claim): the decoder only checks ids against the claim, so a group holding
an id this model has no embedding for is unusable here (it would fail the forward pass)."""

from dataclasses import dataclass

import numpy as np

from ftis.node.tasks import Task, resolve_gold
from ftis.node.trainer.groups import TrainingGroup
from ftis.protocol import Group, RolloutBatch


@dataclass(frozen=True)
class Scored:
    groups: list[TrainingGroup]  # usable groups, rewards recomputed
    unusable: int  # groups without a gold answer this node trusts, or with ids outside its vocabulary
    rewards: list[float]  # every scored completion's reward, for metrics


def score_batch(batch: RolloutBatch, task: Task, tokenizer: object, *, trust_peer_answers: bool,
                off_policy: bool, vocab_size: int | None = None) -> Scored:
    """``vocab_size``: this node's model's; groups with an id at or above it are unusable (None: no check)."""
    groups, rewards, unusable = [], [], 0
    check_ids = vocab_size is not None and batch.tokenizer.vocab_size > vocab_size  # else decode checked them
    for group in batch.groups:
        if check_ids and not _within_vocabulary(group, vocab_size):
            unusable += 1
            continue
        ref = group.task
        gold = resolve_gold(task, ref.dataset, ref.split, ref.index, ref.answer, trust_peer_answers).answer
        if gold is None:
            unusable += 1
            continue
        columns = group.columns
        texts = decode_completions(tokenizer, columns.token_ids, columns.lengths)
        group_rewards = np.array([task.reward(text, gold) for text in texts], dtype=np.float64)
        rewards.extend(group_rewards.tolist())
        groups.append(TrainingGroup(
            group_id=group.group_id,
            peer_id=batch.peer_id,
            prompt_ids=group.prompt_ids,
            completions=columns,
            rewards=group_rewards,
            off_policy=off_policy,
            temperature=batch.sampling.temperature,
            task=ref,
        ))
    return Scored(groups, unusable, rewards)


def decode_completions(tokenizer: object, token_ids: np.ndarray, lengths: np.ndarray) -> list[str]:
    """Each completion's text, special tokens (EOS, padding) left out."""
    ends = np.cumsum(lengths).tolist()
    starts = [0, *ends[:-1]]
    return tokenizer.batch_decode([token_ids[a:b].tolist() for a, b in zip(starts, ends, strict=True)],
                                  skip_special_tokens=True)


def _within_vocabulary(group: Group, vocab_size: int) -> bool:
    ids = group.columns.token_ids
    return int(group.prompt_ids.max()) < vocab_size and (not ids.size or int(ids.max()) < vocab_size)
