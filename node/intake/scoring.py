"""Rewards this node computes for a batch's groups, its own or a peer's (docs/node.md): the
completion text is decoded with this node's tokenizer where the generator's is the same (same fingerprint),
and is the text the batch carries where it is another (the group is then rebuilt in this node's tokens and
trained per sequence: ``text_groups.py``); either is scored by this node's task against the gold answer it
trusts. The generator's reward in the batch is advisory and never used. A batch of another tokenizer without
texts (an older peer's) is unusable.

A peer may claim a larger vocabulary than this node's model has (same tokenizer fingerprint, another
embedding size, or a hostile claim): the decoder only checks ids against the claim, so a group holding
an id this model has no embedding for is unusable here (it would fail the forward pass).

A group that names one of this node's own problems is trained on with this node's gold answer, so its
prompt must be that problem's: its ``prompt_ids`` must equal a rendering this node makes of the problem
(``Prompter.renderings``), else the group is unusable and counted as ``mismatched`` (the caller charges the
peer: a peer that put another prompt in front of a problem would make this node learn the problem's answer
for a question it never asked). It must also name the split this node trains on (``split``): a reference
into the held-out split would train the node on its own evaluation set. A group of another tokenizer must name
one of this node's problems: its prompt is rendered here from this node's copy, so the gold answer is never
the peer's for a question this node cannot see."""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ftis.node.intake.text_groups import Retokenizer
from ftis.node.swarm.transport import ReceivedBatch
from ftis.node.tasks import Problem, Task, resolve_gold
from ftis.node.tasks.prompts import Prompter
from ftis.node.tasks.steps import zero_false_steps
from ftis.node.trainer.groups import TrainingGroup, sampler_sums
from ftis.protocol import Group, RolloutBatch
from ftis.protocol.schema import CompletionColumns

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


BatchKey = tuple[str, int]  # (peer id, round): one batch (a peer's batch arrives at most once)
Texts = dict[BatchKey, list[list[str] | None]]  # each group's completion texts, decoded ahead (None: not decoded)


def batch_key(item: ReceivedBatch) -> BatchKey:
    return item.peer_id, item.batch.round


@dataclass(frozen=True)
class Scored:
    groups: list[TrainingGroup]  # usable groups, rewards recomputed
    unusable: int  # groups without a gold answer this node trusts, with ids outside its vocabulary, mismatched, or
    #                whose scoring failed
    rewards: list[float]  # every scored completion's reward, for metrics
    mismatched: int = 0  # ...of them: groups naming one of this node's problems in front of another prompt
    per_sequence: bool = False  # another tokenizer's batch: its usable groups are this node's tokens of its texts
    failed: int = 0  # ...groups whose scoring raised (the peer is charged: a peer's group never ends a round)
    too_long: int = 0  # ...groups of a problem this node lacks whose rows do not fit one pass (``max_row_tokens``)
    unscored: int = 0  # groups not scored: the step's time for scoring was spent (``deadline``)
    right: int = 0  # completions whose answer was right (``task.reward``), false steps or not
    false_steps: int = 0  # ...of them: a false equation on the way, so their reward is 0 (``check_steps``)


UNUSABLE, MISMATCHED, TOO_LONG = "unusable", "mismatched", "too_long"  # why a group is not trained on
Rewards = Callable[[Sequence[str], str], np.ndarray]  # (completion texts, gold) -> their rewards, within the time


class _OutOfTime(Exception):
    """The step's time for scoring ran out inside a group: it and the groups after it are left unscored."""


def score_batch(batch: RolloutBatch, task: Task, tokenizer: "PreTrainedTokenizerBase", *, trust_peer_answers: bool,
                off_policy: bool, vocab_size: int | None = None,
                texts: Sequence[list[str] | None] | None = None, split: str | None = None,
                fingerprint: str | None = None, retokenizer: Retokenizer | None = None,
                per_sequence: bool = False, prompter: Prompter | None = None,
                deadline: float | None = None, max_row_tokens: int | None = None, check_steps: bool = False) -> Scored:
    """``vocab_size``: this node's model's; groups with an id at or above it are unusable (None: no check).
    ``texts``: the groups' completion texts as ``decode_groups`` gave them (decoded ahead, on another thread);
    None: decoded here. ``split``: the only split of ``task`` a group may name (None: any). ``fingerprint``: this
    node's tokenizer's; a batch of another is rebuilt by ``retokenizer`` (None: such a batch is unusable), and
    None takes every batch as this node's tokenizer's. ``per_sequence``: groups of this node's tokenizer are trained
    per sequence too (``[loss] same_tokenizer_weights``, an ablation). ``prompter``: how this node renders its
    prompts, whose ``renderings`` a group's prompt must be one of (None: one-turn prompts, raw or in the template).
    ``deadline``: a ``time.monotonic()`` past which the groups left are not scored, the one being scored included
    (checked before each completion's reward; None: every group is). ``max_row_tokens``: the most tokens, prompt and
    completion, of a row of a group whose prompt this node cannot check (a problem it lacks, its gold trusted); a
    longer one is unusable and counted in ``too_long`` (None: no bound). ``check_steps``: a right answer reached
    through a false equation scores 0 (``tasks/steps.py``), counted in ``false_steps``.

    Whatever a group holds, scoring it never raises: a group whose scoring fails (a reward function's error on a
    peer's text, say) is unusable and counted in ``failed``."""
    other = fingerprint is not None and batch.tokenizer.fingerprint != fingerprint
    judged = {"right": 0, "false_steps": 0}

    def reward(texts: Sequence[str], gold: str) -> np.ndarray:
        rewards = np.empty(len(texts), dtype=np.float64)
        for c, text in enumerate(texts):
            if deadline is not None and time.monotonic() > deadline:
                raise _OutOfTime
            rewards[c] = task.reward(text, gold)
        judged["right"] += int((rewards > 0).sum())
        if check_steps:
            judged["false_steps"] += zero_false_steps(texts, rewards)
        return rewards

    if other:
        def one(g: int, group: Group) -> TrainingGroup | str:
            return _other_tokenizer_group(batch, group, task, trust_peer_answers, off_policy, split, retokenizer,
                                          reward)
    else:
        limit = _id_limit(batch, vocab_size)
        prompter = prompter if prompter is not None and prompter.task is task else Prompter.build(tokenizer, task)

        def one(g: int, group: Group) -> TrainingGroup | str:
            decoded = texts[g] if texts is not None else None
            return _own_tokenizer_group(batch, group, task, tokenizer, trust_peer_answers, off_policy, limit, split,
                                        prompter, decoded, per_sequence, reward, max_row_tokens)
    groups, rewards, counts = [], [], {UNUSABLE: 0, MISMATCHED: 0, TOO_LONG: 0, "failed": 0, "unscored": 0}
    for g, group in enumerate(batch.groups):
        if deadline is not None and time.monotonic() > deadline:
            counts["unscored"] = len(batch.groups) - g
            break
        try:
            outcome = one(g, group)
        except _OutOfTime:
            counts["unscored"] = len(batch.groups) - g
            break
        except Exception:  # a peer's group, whatever it holds, costs only itself
            counts["failed"] += 1
            continue
        if isinstance(outcome, str):
            counts[outcome] += 1
        else:
            groups.append(outcome)
            rewards.extend(outcome.rewards.tolist())
    unusable = counts[UNUSABLE] + counts[MISMATCHED] + counts[TOO_LONG] + counts["failed"]
    return Scored(groups, unusable, rewards, counts[MISMATCHED],
                  per_sequence=(other or per_sequence) and bool(groups), failed=counts["failed"],
                  unscored=counts["unscored"], too_long=counts[TOO_LONG], **judged)


def _own_tokenizer_group(batch: RolloutBatch, group: Group, task: Task, tokenizer: "PreTrainedTokenizerBase",
                         trust_peer_answers: bool, off_policy: bool, limit: int | None, split: str | None,
                         prompter: Prompter, decoded: list[str] | None, per_sequence: bool,
                         reward: "Rewards", max_row_tokens: int | None) -> TrainingGroup | str:
    """A group in this node's tokens, scored on its ids decoded here (or ``decoded``, decoded ahead)."""
    if limit is not None and not _within_vocabulary(group, limit):
        return UNUSABLE
    ref = group.task
    if split is not None and ref.dataset == task.name and ref.split != split:
        return UNUSABLE  # one of our problems, but not one we train on (the held-out split, say)
    resolved = resolve_gold(task, ref.dataset, ref.split, ref.index, ref.answer, trust_peer_answers)
    gold = resolved.answer
    if gold is None:
        return UNUSABLE
    columns = group.columns
    if resolved.problem is not None and not _prompt_of(group, resolved.problem, prompter):
        return MISMATCHED
    if (resolved.problem is None and max_row_tokens is not None  # a prompt this node cannot check: a pass's worth
            and len(group.prompt_ids) + int(columns.lengths.max(initial=0)) > max_row_tokens):
        return TOO_LONG
    if decoded is None:
        decoded = decode_completions(tokenizer, columns.token_ids, columns.lengths)
    group_rewards = reward(decoded, gold)
    return _training_group(batch, group, group_rewards, off_policy,
                           sequence_logprobs=sampler_sums(columns) if per_sequence else None)


def _other_tokenizer_group(batch: RolloutBatch, group: Group, task: Task, trust_peer_answers: bool,
                           off_policy: bool, split: str | None, retokenizer: Retokenizer | None,
                           reward: "Rewards") -> TrainingGroup | str:
    """A group whose generator used another tokenizer: if it names one of this node's problems and carries texts,
    rebuilt in this node's tokens (``text_groups.py``) and scored on its texts."""
    ref = group.task
    texts = group.columns.texts
    if retokenizer is None or texts is None or (split is not None and ref.dataset == task.name
                                                and ref.split != split):
        return UNUSABLE
    resolved = resolve_gold(task, ref.dataset, ref.split, ref.index, ref.answer, trust_peer_answers)
    if resolved.answer is None or resolved.problem is None:  # no problem of ours: no prompt to render
        return UNUSABLE
    group_rewards = reward(texts, resolved.answer)
    completions = retokenizer.completions(group, group_rewards)
    if completions is None:
        return UNUSABLE
    rebuilt = group.replace(prompt_ids=retokenizer.prompt(task, resolved.problem))
    return _training_group(batch, rebuilt, group_rewards, off_policy, completions=completions,
                           sequence_logprobs=sampler_sums(group.columns))


def _prompt_of(group: Group, problem: Problem, prompter: Prompter) -> bool:
    """Whether the group's prompt ids are a rendering of ``problem`` this node makes itself."""
    return any(np.array_equal(group.prompt_ids, ids) for ids in prompter.renderings(problem))


def _training_group(batch: RolloutBatch, group: Group, rewards: np.ndarray, off_policy: bool, *,
                    completions: CompletionColumns | None = None,
                    sequence_logprobs: np.ndarray | None = None) -> TrainingGroup:
    return TrainingGroup(
        group_id=group.group_id,
        peer_id=batch.peer_id,
        prompt_ids=group.prompt_ids,
        completions=group.columns if completions is None else completions,
        rewards=rewards,
        off_policy=off_policy,
        temperature=batch.sampling.temperature,
        task=group.task,
        sequence_logprobs=sequence_logprobs,
    )


def decode_groups(batch: RolloutBatch, tokenizer: "PreTrainedTokenizerBase",
                  vocab_size: int | None = None) -> list[list[str] | None]:
    """Each group's completion texts, as ``score_batch(..., vocab_size=vocab_size)`` would decode them; None
    for a group it finds outside the vocabulary (never decoded), or whose decoding raised (``score_batch`` decodes it
    again, where a failure is the group's)."""
    limit = _id_limit(batch, vocab_size)
    return [None if limit is not None and not _within_vocabulary(group, limit) else _decoded(tokenizer, group)
            for group in batch.groups]


def _decoded(tokenizer: "PreTrainedTokenizerBase", group: Group) -> list[str] | None:
    try:
        return decode_completions(tokenizer, group.columns.token_ids, group.columns.lengths)
    except Exception:  # a peer's ids, on the decoder's thread: nothing raised here may reach the round
        return None


def _id_limit(batch: RolloutBatch, vocab_size: int | None) -> int | None:
    """The bound ids must stay below here, or None where decoding already checked them against the batch's
    claimed vocabulary (no larger than this node's) or no check was asked for."""
    return vocab_size if vocab_size is not None and batch.tokenizer.vocab_size > vocab_size else None


def decode_completions(tokenizer: "PreTrainedTokenizerBase", token_ids: np.ndarray, lengths: np.ndarray) -> list[str]:
    """Each completion's text, special tokens (EOS, padding) left out."""
    ends = np.cumsum(lengths).tolist()
    starts = [0, *ends[:-1]]
    return tokenizer.batch_decode([token_ids[a:b].tolist() for a, b in zip(starts, ends, strict=True)],
                                  skip_special_tokens=True)


def _within_vocabulary(group: Group, vocab_size: int) -> bool:
    ids = group.columns.token_ids
    return int(group.prompt_ids.max()) < vocab_size and (not ids.size or int(ids.max()) < vocab_size)
