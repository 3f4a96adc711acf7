"""What the trainer trains on: groups of completions with this node's rewards and a flag saying
whether the filter applies to them (docs/loss.md), and which of them share one advantage group.

A group is trained per token when its ids are its generator's (same tokenizer), and per sequence when its
generator used another tokenizer: its ids are then this node's tokens of the completion texts, and the
generator's log-prob comes as one number per completion (``sequence_logprobs``; ``intake/text_groups.py``).

A group is normally its own advantage group (vertical mode). In horizontal mode several nodes'
groups for one shared prompt carry the same ``advantage_key`` and form one advantage group: the
advantage of each completion is over all of them (``intake/shared_groups.py`` decides which share a key).
The trainer computes each completion's advantage over its whole advantage group (``advantages``) before it packs
micro-batches, so that one too large for a forward pass can be split into parts of its rows (``rows``).
"""

from dataclasses import dataclass, replace

import numpy as np

from ftis.protocol.schema import CompletionColumns, TaskRef


@dataclass(frozen=True, eq=False)
class TrainingGroup:
    group_id: str
    peer_id: str  # who generated it: this node's own id for its own groups
    prompt_ids: np.ndarray  # (p,) int64, exactly what the generator conditioned on
    completions: CompletionColumns  # ids and sampler log-probs, one after another
    rewards: np.ndarray  # (G,) float, recomputed by this node from the completion text
    off_policy: bool  # peers' groups and this node's stale ones (all of them with filter_local)
    temperature: float  # the sampler's: log-probs are compared under the same temperature
    task: TaskRef | None = None  # the problem it answers, as the generator named it
    advantage_key: str | None = None  # groups with one key form one advantage group; None: alone
    # (G,) float64 log π_gen(y) of each completion, the generator's sampler log-probs summed over its own tokens,
    # when they are not this node's tokens: then ``completions`` holds this node's tokens of the texts (and no
    # per-token sampler log-probs) and the group is trained per sequence. None: per token.
    sequence_logprobs: np.ndarray | None = None
    # (G,) float Â of each completion over its whole advantage group, once the trainer computed it; None before
    advantages: np.ndarray | None = None

    @property
    def size(self) -> int:
        return len(self.completions)

    @property
    def per_sequence(self) -> bool:
        return self.sequence_logprobs is not None

    def sampler_sums(self) -> np.ndarray:
        """(G,) float64 log π_gen(y) of each completion: ``sequence_logprobs``, or its sampler log-probs summed (a
        group in this node's tokens, trained per sequence beside another tokenizer's in one advantage group)."""
        return self.sequence_logprobs if self.sequence_logprobs is not None else sampler_sums(self.completions)

    @property
    def num_tokens(self) -> int:
        """Prompt plus completion tokens of all its sequences: what a forward pass costs."""
        return int(self.completions.lengths.sum()) + self.size * len(self.prompt_ids)

    def rows(self, start: int, stop: int) -> "TrainingGroup":
        """The group of its completions ``start`` to ``stop`` (a part of an advantage group split across forward
        passes: it keeps its ``advantages``, computed over the whole)."""
        columns = self.completions
        ends = np.cumsum(columns.lengths)
        first, last = (int(ends[start - 1]) if start else 0), (int(ends[stop - 1]) if stop else 0)
        texts = columns.texts
        part = replace(columns, token_ids=columns.token_ids[first:last],
                       sampler_logprobs=columns.sampler_logprobs[first:last], lengths=columns.lengths[start:stop],
                       rewards=columns.rewards[start:stop], finish_reasons=columns.finish_reasons[start:stop],
                       texts=None if texts is None else texts[start:stop])
        return replace(self, completions=part, rewards=self.rewards[start:stop],
                       sequence_logprobs=None if self.sequence_logprobs is None else self.sequence_logprobs[start:stop],
                       advantages=None if self.advantages is None else self.advantages[start:stop])

    @property
    def informative(self) -> bool:
        """Whether its rewards differ: a group whose rewards are all equal teaches nothing."""
        return bool(self.rewards.size) and bool(np.ptp(self.rewards) > 0)


def sampler_sums(columns: CompletionColumns) -> np.ndarray:
    """(G,) float64: each completion's sampler log-probs summed over its tokens (0 for one without tokens)."""
    lengths = columns.lengths
    sums = np.zeros(len(lengths), np.float64)
    has_tokens = lengths > 0
    if has_tokens.any():
        starts = np.cumsum(lengths) - lengths
        sums[has_tokens] = np.add.reduceat(columns.sampler_logprobs.astype(np.float64), starts[has_tokens])
    return sums


def advantage_index(groups: list[TrainingGroup]) -> list[int]:
    """Each group's advantage group, numbered 0..K-1 in order of first appearance: groups sharing an
    ``advantage_key`` get one number, a group without a key a number of its own."""
    numbers: dict[str, int] = {}
    index: list[int] = []
    count = 0
    for group in groups:
        key = group.advantage_key
        if key is None or key not in numbers:
            if key is not None:
                numbers[key] = count
            index.append(count)
            count += 1
        else:
            index.append(numbers[key])
    return index


def advantage_groups(groups: list[TrainingGroup]) -> list[list[TrainingGroup]]:
    """The groups gathered by advantage group, in order of first appearance (one group each in vertical mode)."""
    gathered: list[list[TrainingGroup]] = []
    for group, number in zip(groups, advantage_index(groups), strict=True):
        if number == len(gathered):
            gathered.append([])
        gathered[number].append(group)
    return gathered


def rewards_vary(gathered: list[TrainingGroup]) -> bool:
    """Whether the rewards of one advantage group differ (a group whose rewards are all equal teaches nothing)."""
    rewards = np.concatenate([group.rewards for group in gathered]) if gathered else np.zeros(0)
    return bool(rewards.size) and bool(np.ptp(rewards) > 0)
