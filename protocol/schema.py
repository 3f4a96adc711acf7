"""The decoded form of a rollout batch: batch → group → completion (docs/protocol.md).

Arrays are NumPy arrays: ids int64, ``sampler_logprobs`` float32; decoded ones are read-only views
of one buffer per batch, so decoding copies nothing per group or completion. A group keeps its
completions as columns (``CompletionColumns``) and gives them as ``Completion`` objects on demand:
decoding does a fixed amount of Python work per group, not per completion.
"""

import numbers
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from ftis.protocol.errors import EncodeError
from ftis.protocol.limits import FINISH_REASONS

T = TypeVar("T")


def _arrays_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.array_equal(a, b))


def trusted(cls: type[T], **fields: Any) -> T:
    """An instance of the frozen dataclass ``cls`` from values already checked (the decoder's path).

    The same object as ``cls(**fields)`` at under half the cost: a frozen dataclass's ``__init__``
    pays one ``object.__setattr__`` per field, and decoding builds one object per group. It fills the
    instance dict directly, so it must not be used for a class with ``__post_init__`` or slots.
    """
    instance = object.__new__(cls)
    instance.__dict__.update(fields)
    return instance


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
    # v3: the completion as text, decoded by the generator's tokenizer without special tokens (what a peer with
    # another tokenizer tokenizes itself); None where the batch carries no texts (v1, v2, or not sent).
    text: str | None = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Completion):
            return NotImplemented
        return (
            _arrays_equal(self.token_ids, other.token_ids)
            and _arrays_equal(self.sampler_logprobs, other.sampler_logprobs)
            and self.reward == other.reward
            and self.finish_reason == other.finish_reason
            and self.text == other.text
        )

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids.shape[0])


@dataclass(frozen=True, eq=False)
class CompletionColumns:
    """A group's completions as columns: their ids one after another in one array, their log-probs in
    another, and one length, reward and finish reason each. What decoding produces, and what a trainer
    packs into tensors without touching completions one by one."""

    token_ids: np.ndarray  # (total,) int64
    sampler_logprobs: np.ndarray  # (total,) float32 when decoded; as given (float32 or float64) when built
    lengths: np.ndarray  # (G,) int64, sum = total
    rewards: np.ndarray  # (G,) float64, the generator's (advisory)
    finish_reasons: tuple[str, ...]  # (G,)
    texts: tuple[str, ...] | None = None  # (G,) each completion's text (``Completion.text``), or None: no texts

    def __len__(self) -> int:
        return len(self.finish_reasons)

    def to_completions(self) -> tuple[Completion, ...]:
        ends = np.cumsum(self.lengths).tolist()
        starts = [0, *ends[:-1]]
        ids, logprobs = self.token_ids, self.sampler_logprobs
        texts = self.texts if self.texts is not None else (None,) * len(self)
        return tuple(
            trusted(Completion, token_ids=ids[a:b], sampler_logprobs=logprobs[a:b], reward=reward, finish_reason=finish,
                    text=text)
            for a, b, reward, finish, text in zip(starts, ends, self.rewards.tolist(), self.finish_reasons, texts,
                                                  strict=True)
        )

    @classmethod
    def from_completions(cls, completions: tuple[Completion, ...]) -> "CompletionColumns":
        """Columns from ``Completion`` objects; ``EncodeError`` (field ``completions[c]...``) for a
        completion whose parts are not 1-D arrays of matching length, a non-numeric reward, an unknown
        finish reason, or a text that is not a string where others have one (texts: every completion or
        none). Values (id ranges, log-prob signs, texts' UTF-8 and length) are checked by ``encode``, over
        whole columns."""
        ids: list[np.ndarray] = []
        logprobs: list[np.ndarray] = []
        texts: list[str] = []
        for c, completion in enumerate(completions):
            token_ids = np.asarray(completion.token_ids)
            sampler_logprobs = np.asarray(completion.sampler_logprobs)
            if token_ids.ndim != 1 or not (token_ids.dtype.kind in "iu" or token_ids.size == 0):
                raise EncodeError(f"completions[{c}].token_ids", "must be a 1-D array of integers")
            if sampler_logprobs.shape != token_ids.shape or sampler_logprobs.dtype.kind not in "fiu":
                raise EncodeError(f"completions[{c}].sampler_logprobs", "must be numbers, one per token id")
            if not isinstance(completion.reward, numbers.Real):  # numpy would parse "1.5" as 1.5
                kind = type(completion.reward).__name__
                raise EncodeError(f"completions[{c}].reward", f"expected a number, got {kind}")
            if completion.finish_reason not in FINISH_REASONS:
                raise EncodeError(f"completions[{c}].finish_reason", f"must be one of {FINISH_REASONS}")
            if (completion.text is None) != (completions[0].text is None) or not (
                    completion.text is None or isinstance(completion.text, str)):
                raise EncodeError(f"completions[{c}].text",
                                  "must be a string in every completion of a group, or in none")
            if completion.text is not None:
                texts.append(completion.text)
            ids.append(token_ids.astype(np.int64, copy=False))
            exact = sampler_logprobs.dtype.kind == "f"  # float64 stays float64: quantized from the given values
            logprobs.append(sampler_logprobs if exact else sampler_logprobs.astype(np.float32))
        return cls(
            token_ids=np.concatenate(ids) if ids else np.zeros(0, np.int64),
            sampler_logprobs=np.concatenate(logprobs) if logprobs else np.zeros(0, np.float32),
            lengths=np.array([len(i) for i in ids], np.int64),
            rewards=np.array([c.reward for c in completions], np.float64),
            finish_reasons=tuple(c.finish_reason for c in completions),
            texts=tuple(texts) if texts else None,  # every completion's (checked above), or none
        )


class Group:
    """One prompt and the completions one generator sampled for it (a vertical group).

    Build it from ``Completion`` objects (``Group(group_id, task, prompt_ids, completions)``) or from
    columns (``Group.from_columns``, what the decoder does). Either form is derived from the other on
    first use and kept, so ``group.completions`` and ``group.columns`` always describe the same data.
    Immutable, like the dataclasses around it.
    """

    __slots__ = ("_columns", "_completions", "group_id", "prompt_ids", "task")

    group_id: str
    task: TaskRef
    prompt_ids: np.ndarray  # (p,) int64: exactly the ids the generator conditioned on
    _completions: tuple[Completion, ...] | None  # at least one of these two is set
    _columns: CompletionColumns | None

    def __init__(self, group_id: str, task: TaskRef, prompt_ids: np.ndarray, completions: tuple[Completion, ...]):
        _set = object.__setattr__
        _set(self, "group_id", group_id)
        _set(self, "task", task)
        _set(self, "prompt_ids", prompt_ids)
        _set(self, "_completions", tuple(completions))
        _set(self, "_columns", None)

    @classmethod
    def from_columns(cls, group_id: str, task: TaskRef, prompt_ids: np.ndarray, columns: CompletionColumns) -> "Group":
        group = object.__new__(cls)
        _set = object.__setattr__
        _set(group, "group_id", group_id)
        _set(group, "task", task)
        _set(group, "prompt_ids", prompt_ids)
        _set(group, "_completions", None)
        _set(group, "_columns", columns)
        return group

    @property
    def completions(self) -> tuple[Completion, ...]:
        if self._completions is None:
            assert self._columns is not None
            object.__setattr__(self, "_completions", self._columns.to_completions())
        assert self._completions is not None
        return self._completions

    @property
    def columns(self) -> CompletionColumns:
        if self._columns is None:
            assert self._completions is not None
            object.__setattr__(self, "_columns", CompletionColumns.from_completions(self._completions))
        assert self._columns is not None
        return self._columns

    def replace(self, **changes: Any) -> "Group":
        """A copy with some of ``group_id``, ``task``, ``prompt_ids``, ``completions`` changed (what
        ``dataclasses.replace`` does for the other schema classes)."""
        fields = {"group_id": self.group_id, "task": self.task, "prompt_ids": self.prompt_ids}
        if "completions" not in changes and self._columns is not None and self._completions is None:
            return Group.from_columns(**{**fields, **changes}, columns=self._columns)
        return Group(**{**fields, "completions": self.completions, **changes})

    @property
    def size(self) -> int:
        return len(self._completions) if self._completions is not None else len(self.columns)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Group is immutable: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Group is immutable: cannot delete {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Group):
            return NotImplemented
        return (
            self.group_id == other.group_id
            and self.task == other.task
            and _arrays_equal(self.prompt_ids, other.prompt_ids)
            and self.completions == other.completions
        )

    __hash__ = None  # type: ignore[assignment]  # mutable-free but array-holding: no hash, like the dataclasses with eq=False

    def __repr__(self) -> str:
        return f"Group(group_id={self.group_id!r}, task={self.task!r}, prompt_ids=<{len(self.prompt_ids)} ids>, " \
               f"completions=<{self.size}>)"

    def __reduce__(self) -> tuple:
        return (Group, (self.group_id, self.task, self.prompt_ids, self.completions))


@dataclass(frozen=True)
class RolloutBatch:
    run_id: str
    peer_id: str
    round: int  # the publisher's round this batch belongs to (one batch a round; the wire key is "seq")
    created_at: float  # unix time, seconds
    policy: PolicyInfo
    tokenizer: TokenizerInfo
    sampling: SamplingSettings
    groups: tuple[Group, ...]

    @property
    def num_completions(self) -> int:
        return sum(group.size for group in self.groups)

    def without_texts(self) -> "RolloutBatch":
        """The batch with no completion texts (what a receiver of the generator's own tokenizer keeps: it never
        reads them, and they can hold several times the memory of the ids)."""
        if all(group.columns.texts is None for group in self.groups):
            return self
        groups = tuple(Group.from_columns(group.group_id, group.task, group.prompt_ids,
                                          replace(group.columns, texts=None)) for group in self.groups)
        return replace(self, groups=groups)

    @property
    def num_completion_tokens(self) -> int:
        return sum(int(group.columns.lengths.sum()) for group in self.groups)

    @property
    def num_prompt_tokens(self) -> int:
        return sum(int(group.prompt_ids.shape[0]) for group in self.groups)
