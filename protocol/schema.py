"""The decoded form of a rollout batch: batch → group → completion (DESIGN §3).

Arrays are read-only NumPy arrays: ``token_ids`` int64, ``sampler_logprobs`` float32. Decoded
completions share one buffer per batch (their arrays are views), so decoding copies nothing per
completion.
"""

from dataclasses import dataclass

import numpy as np


def _arrays_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b))


@dataclass(frozen=True)
class PolicyInfo:
    model: str  # hub name or local path of the generating model
    revision: str  # model revision or "" when unknown
    adapter: str  # "full" or "lora"
    policy_version: int  # optimizer steps the generating policy had taken


@dataclass(frozen=True)
class TokenizerInfo:
    fingerprint: str  # hash of the tokenizer: peers with another fingerprint cannot use the ids
    vocab_size: int  # every token id is below it


@dataclass(frozen=True)
class SamplingSettings:
    temperature: float
    top_p: float
    top_k: int  # 0 = off
    max_new_tokens: int


@dataclass(frozen=True)
class TaskRef:
    dataset: str  # e.g. "gsm8k", "arith"
    split: str
    index: int
    answer: str  # the gold answer as the generator knew it; the receiver prefers its own copy


@dataclass(frozen=True, eq=False)
class Completion:
    token_ids: np.ndarray  # (n,) int64
    sampler_logprobs: np.ndarray  # (n,) float32, ≤ 0
    reward: float  # the generator's reward: advisory, the receiver recomputes it
    finish_reason: str  # "stop" or "length"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Completion):
            return NotImplemented
        return (
            _arrays_equal(self.token_ids, other.token_ids)
            and _arrays_equal(self.sampler_logprobs, other.sampler_logprobs)
            and self.reward == other.reward
            and self.finish_reason == other.finish_reason
        )

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids.shape[0])

    @classmethod
    def _from_checked(
        cls, token_ids: np.ndarray, sampler_logprobs: np.ndarray, reward: float, finish_reason: str
    ) -> "Completion":
        """The decoder's constructor: the same object as ``Completion(...)`` at under half the cost (a
        frozen dataclass's ``__init__`` pays one ``object.__setattr__`` per field, and decoding builds a
        completion per ~100 tokens). It fills the instance dict directly, so it is only for values
        already checked: it would skip a ``__post_init__``, should one be added."""
        completion = object.__new__(cls)
        fields = completion.__dict__
        fields["token_ids"] = token_ids
        fields["sampler_logprobs"] = sampler_logprobs
        fields["reward"] = reward
        fields["finish_reason"] = finish_reason
        return completion


@dataclass(frozen=True, eq=False)
class Group:
    group_id: str
    task: TaskRef
    prompt_ids: np.ndarray  # (p,) int64: exactly the ids the generator conditioned on
    completions: tuple[Completion, ...]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Group):
            return NotImplemented
        return (
            self.group_id == other.group_id
            and self.task == other.task
            and _arrays_equal(self.prompt_ids, other.prompt_ids)
            and self.completions == other.completions
        )


@dataclass(frozen=True)
class RolloutBatch:
    run_id: str
    peer_id: str
    seq: int  # the publisher's sequence number, increasing
    created_at: float  # unix time, seconds
    policy: PolicyInfo
    tokenizer: TokenizerInfo
    sampling: SamplingSettings
    groups: tuple[Group, ...]

    @property
    def num_completions(self) -> int:
        return sum(len(group.completions) for group in self.groups)

    @property
    def num_completion_tokens(self) -> int:
        return sum(c.num_tokens for group in self.groups for c in group.completions)

    @property
    def num_prompt_tokens(self) -> int:
        return sum(int(group.prompt_ids.shape[0]) for group in self.groups)
