"""Protocol decoding (v1, v2 and v3): strict and total.

Wire form: a msgpack map ``{"v": 3, "kind": "batch", "body": {...}}`` (v1, v2: ``"v": 1``, ``"v": 2``, the same
body without ``texts``). The body is columnar, so decoding does a small, fixed amount of Python work per
completion and none per token:

    run_id, peer_id: str;  seq: int (the round);  created_at: float (unix seconds)
    policy:      {model: str, revision: str, adapter: "full"|"lora", policy_version: int}
    tokenizer:   {fingerprint: str, vocab_size: int}
    sampling:    {temperature: float, top_p: float, top_k: int, max_new_tokens: int}
    groups:      {group_id: [str], dataset: [str], split: [str], index: [int], answer: [str],
                  size: bin, prompt_length: bin}            one entry per group; bin = uint32 LE
    completions: {length: bin (uint32 LE), reward: bin (float64 LE; the generator's, advisory),
                  finish_reason: bin (uint8 index into FINISH_REASONS)}    one per completion
    tokens:      {id_width: int, logprob_width: int, data: bin}   the token column (``columns.py``)
    texts:       {length: bin (uint32 LE), data: bin}   v3, optional: each completion's text (``texts.py``)

Completions are listed group after group, in group order.
Any malformed input raises ``DecodeError`` naming the field; nothing is built until every check
has passed, so a caller never sees part of a batch. The message's msgpack is bounded from its headers
(``envelope.py``, ``BATCH_BOUNDS``) before msgpack builds any object of it.
"""

from dataclasses import dataclass, replace

import numpy as np

from ftis.protocol.columns import dequantize_logprobs, id_width, unpack_columns
from ftis.protocol.envelope import Bounds, unpack_message
from ftis.protocol.errors import DecodeError
from ftis.protocol.limits import (
    ADAPTERS,
    FINISH_REASONS,
    MAX_ANSWER_CHARS,
    MAX_BATCH_TOKENS,
    MAX_BATCH_VALUES,
    MAX_COMPLETION_TOKENS,
    MAX_DEPTH,
    MAX_GROUP_SIZE,
    MAX_GROUPS,
    MAX_LOGPROB_WIDTH,
    MAX_NAME_CHARS,
    MAX_PAYLOAD_BYTES,
    MAX_PROMPT_TOKENS,
    MAX_ROUND,
    MAX_TEMPERATURE,
    MAX_VOCAB_SIZE,
    MIN_TEMPERATURE,
)
from ftis.protocol.reader import FieldReader
from ftis.protocol.schema import (
    CompletionColumns,
    Group,
    PolicyInfo,
    RolloutBatch,
    SamplingSettings,
    TaskRef,
    TokenizerInfo,
    trusted,
)
from ftis.protocol.texts import check_text_lengths, unpack_texts

KIND_BATCH = "batch"
BATCH_BOUNDS = Bounds(max_bytes=MAX_PAYLOAD_BYTES, max_depth=MAX_DEPTH, max_values=MAX_BATCH_VALUES,
                      max_items=MAX_GROUPS)
_INT64_MAX = (1 << 63) - 1
_MAX_TIME = 1e11  # unix seconds (year ~5000): a sanity bound, not a clock check


def decode(data: bytes) -> RolloutBatch:
    """The batch in ``data``."""
    return read(data).inflate()


def read(data: bytes) -> "CompressedBatch":
    """The batch in ``data``, checked up to its compressed columns, which are not inflated yet: what inflating
    them takes (``CompressedBatch.cost``) is known before a byte is spent on it."""
    version, body = unpack_message(data, KIND_BATCH, BATCH_BOUNDS)
    return _read(body, version)


@dataclass(frozen=True)
class _Layout:
    """The batch's groups and shape, read from its columns and checked, before any token is decoded."""

    group_ids: list[str]  # (K,)
    tasks: list[TaskRef]  # (K,)
    group_sizes: np.ndarray  # (K,) int64
    prompt_lengths: np.ndarray  # (K,) int64
    completion_lengths: np.ndarray  # (N,) int64
    rewards: np.ndarray  # (N,) float64
    finish_codes: bytes  # (N,)

    @property
    def num_ids(self) -> int:
        return int(self.prompt_lengths.sum() + self.completion_lengths.sum())

    @property
    def num_logprobs(self) -> int:
        return int(self.completion_lengths.sum())


# What decoding allocates beyond the columns' own bytes: a group's objects (the group, its columns, the views of
# the columns, its task reference) and a text's (a str object and its slot in its group's tuple), at most.
_GROUP_OVERHEAD_BYTES = 2048
_TEXT_OVERHEAD_BYTES = 96
# A str holds at most 4 bytes a character (one astral character makes the whole string 4 bytes wide); a
# character is at least one byte of UTF-8.
_STR_BYTES_PER_UTF8_BYTE = 4


@dataclass(frozen=True)
class CompressedBatch:
    """A batch whose every field is checked but whose token and text columns are still compressed. ``cost``
    says how many bytes inflating them takes, at most; ``inflate`` does it."""

    header: RolloutBatch  # every field but the groups (empty here)
    layout: _Layout
    token_field: str
    token_data: bytes
    ids_width: int
    q_width: int
    text_field: str
    text_lengths: np.ndarray | None  # (N,) each completion's text in UTF-8 bytes; None: the batch carries no texts
    text_data: bytes

    @property
    def text_bytes(self) -> int:
        """The UTF-8 bytes of every completion's text together (0: no texts)."""
        return 0 if self.text_lengths is None else int(self.text_lengths.sum())

    @property
    def longest_text(self) -> int:
        """The UTF-8 bytes of the longest completion text (0: no texts)."""
        return 0 if self.text_lengths is None or not self.text_lengths.size else int(self.text_lengths.max())

    def cost(self, texts: bool = True) -> int:
        """The most bytes ``inflate(texts)`` allocates, all held at once: the inflated token column, the ids
        (int64), the quantised and the float log-probs, the inflated texts and their strings, and the objects
        of every group and text."""
        layout, num_ids, num_logprobs = self.layout, self.layout.num_ids, self.layout.num_logprobs
        tokens = (self.ids_width + 8) * num_ids + (self.q_width + 4 + 4) * num_logprobs
        groups = _GROUP_OVERHEAD_BYTES * len(layout.group_ids)
        if not texts or self.text_lengths is None:
            return tokens + groups
        strings = (1 + _STR_BYTES_PER_UTF8_BYTE) * self.text_bytes + _TEXT_OVERHEAD_BYTES * len(self.text_lengths)
        return tokens + groups + strings

    def inflate(self, texts: bool = True) -> RolloutBatch:
        """The batch. ``texts`` False: without its texts, which are then not inflated (nor checked beyond their
        lengths): a reader of the generator's own tokenizer reads its ids, never its texts."""
        layout = self.layout
        text_list = None
        if texts and self.text_lengths is not None:
            text_list = unpack_texts(self.text_field, self.text_lengths, self.text_data, layout.completion_lengths)
        ids, q = unpack_columns(self.token_field, self.token_data, layout.num_ids, layout.num_logprobs,
                                self.ids_width, self.q_width)
        _check_vocab(ids, layout, self.header.tokenizer.vocab_size)
        return replace(self.header, groups=_build_groups(layout, ids, dequantize_logprobs(q), text_list))


def _read(body: FieldReader, version: int) -> CompressedBatch:
    run_id = body.text("run_id", MAX_NAME_CHARS)
    peer_id = body.text("peer_id", MAX_NAME_CHARS)
    round_ = body.integer("seq", 0, MAX_ROUND)
    created_at = body.number("created_at", 0.0, _MAX_TIME)
    policy = _policy(body.map("policy"))
    tokenizer = _tokenizer(body.map("tokenizer"))
    sampling = _sampling(body.map("sampling"))
    layout = _layout(body.map("groups"), body.map("completions"), sampling.max_new_tokens)
    tokens = body.map("tokens")
    ids_width = tokens.integer("id_width", 1, 3)
    if ids_width != id_width(tokenizer.vocab_size):
        raise DecodeError(tokens.path("id_width"), f"must be {id_width(tokenizer.vocab_size)} for this vocab_size")
    q_width = tokens.integer("logprob_width", 1, MAX_LOGPROB_WIDTH)
    data = tokens.blob("data", MAX_PAYLOAD_BYTES)
    tokens.done()
    text_column = _text_column(body.optional_map("texts"), version, len(layout.completion_lengths))
    body.done()
    text_lengths, text_data = (None, b"") if text_column is None else text_column
    if text_lengths is not None:
        check_text_lengths(body.path("texts"), text_lengths, layout.completion_lengths)
    header = RolloutBatch(run_id, peer_id, round_, created_at, policy, tokenizer, sampling, ())
    return CompressedBatch(header, layout, tokens.path("data"), data, ids_width, q_width, body.path("texts"),
                           text_lengths, text_data)


def _policy(reader: FieldReader) -> PolicyInfo:
    result = PolicyInfo(
        model=reader.text("model", MAX_NAME_CHARS),
        revision=reader.text("revision", MAX_NAME_CHARS, allow_empty=True),
        adapter=reader.choice("adapter", ADAPTERS),
        policy_version=reader.integer("policy_version", 0, _INT64_MAX),
    )
    reader.done()
    return result


def _tokenizer(reader: FieldReader) -> TokenizerInfo:
    result = TokenizerInfo(
        fingerprint=reader.text("fingerprint", MAX_NAME_CHARS),
        vocab_size=reader.integer("vocab_size", 1, MAX_VOCAB_SIZE),
    )
    reader.done()
    return result


def _sampling(reader: FieldReader) -> SamplingSettings:
    result = SamplingSettings(
        temperature=reader.number("temperature", MIN_TEMPERATURE, MAX_TEMPERATURE),
        top_p=reader.number("top_p", 1e-9, 1.0),
        top_k=reader.integer("top_k", 0, MAX_VOCAB_SIZE),
        max_new_tokens=reader.integer("max_new_tokens", 1, MAX_COMPLETION_TOKENS),
    )
    reader.done()
    return result


def _column(reader: FieldReader, key: str, dtype: str, count: int) -> np.ndarray:
    itemsize = np.dtype(dtype).itemsize
    raw = reader.blob(key, itemsize * count)
    if len(raw) != itemsize * count:
        raise DecodeError(reader.path(key), f"holds {len(raw)} bytes, expected {count} values of {itemsize} bytes")
    return np.frombuffer(raw, dtype)


def _in_range(reader: FieldReader, key: str, values: np.ndarray, low: int, high: int) -> None:
    if values.size and (values.min() < low or values.max() > high):
        raise DecodeError(reader.path(key), f"every value must be in [{low}, {high}]")


def _layout(groups: FieldReader, completions: FieldReader, max_new_tokens: int) -> _Layout:
    group_ids = groups.array("group_id", 1, MAX_GROUPS)
    k = len(group_ids)
    groups.text_list("group_id", k, MAX_NAME_CHARS)
    if len(set(group_ids)) != k:
        raise DecodeError(groups.path("group_id"), "group ids must be unique within a batch")
    tasks = [
        trusted(TaskRef, dataset=dataset, split=split, index=index, answer=answer)
        for dataset, split, index, answer in zip(
            groups.text_list("dataset", k, MAX_NAME_CHARS),
            groups.text_list("split", k, MAX_NAME_CHARS, allow_empty=True),
            groups.integer_list("index", k, 0, _INT64_MAX),
            groups.text_list("answer", k, MAX_ANSWER_CHARS, allow_empty=True),
            strict=True,
        )
    ]
    group_sizes = _column(groups, "size", "<u4", k).astype(np.int64)
    _in_range(groups, "size", group_sizes, 1, MAX_GROUP_SIZE)
    prompt_lengths = _column(groups, "prompt_length", "<u4", k).astype(np.int64)
    _in_range(groups, "prompt_length", prompt_lengths, 1, MAX_PROMPT_TOKENS)
    groups.done()
    n = int(group_sizes.sum())
    completion_lengths = _column(completions, "length", "<u4", n).astype(np.int64)
    _in_range(completions, "length", completion_lengths, 1, max_new_tokens)
    rewards = _column(completions, "reward", "<f8", n)
    if not np.all(np.isfinite(rewards)):
        raise DecodeError(completions.path("reward"), "rewards must be finite")
    finish_codes = _column(completions, "finish_reason", "u1", n)
    _in_range(completions, "finish_reason", finish_codes, 0, len(FINISH_REASONS) - 1)
    completions.done()
    layout = _Layout(group_ids, tasks, group_sizes, prompt_lengths, completion_lengths, rewards, finish_codes.tobytes())
    if layout.num_ids > MAX_BATCH_TOKENS:
        raise DecodeError(completions.path("length"), f"{layout.num_ids} tokens is over the {MAX_BATCH_TOKENS} limit")
    return layout


def _text_column(reader: FieldReader | None, version: int, num_completions: int) -> tuple[np.ndarray, bytes] | None:
    """The text column's lengths (one per completion) and frame, or None: the batch carries no texts."""
    if reader is None:
        return None
    if version < 3:
        raise DecodeError(reader.location, f"a v{version} batch carries no texts (they are v3)")
    lengths = _column(reader, "length", "<u4", num_completions)
    data = reader.blob("data", MAX_PAYLOAD_BYTES)
    reader.done()
    return lengths, data


def _check_vocab(ids: np.ndarray, layout: _Layout, vocab_size: int) -> None:
    bad = np.flatnonzero(ids >= vocab_size)
    if not bad.size:
        return
    # Name the group holding the first offending id: groups are laid out one after another.
    group_ends = np.cumsum(layout.prompt_lengths + np.add.reduceat(layout.completion_lengths,
                                                                  np.cumsum(layout.group_sizes) - layout.group_sizes))
    g = int(np.searchsorted(group_ends, bad[0], side="right"))
    raise DecodeError(
        "body.tokens.data",
        f"token id {int(ids[bad[0]])} in group {g} ({layout.group_ids[g]!r}) is not below vocab_size={vocab_size}",
    )


def _build_groups(layout: _Layout, ids: np.ndarray, logprobs: np.ndarray, texts: list[str] | None
                  ) -> tuple[Group, ...]:
    for array in (ids, logprobs, layout.completion_lengths):  # every group's arrays are views of these
        array.flags.writeable = False
    sizes, prompt_lengths = layout.group_sizes, layout.prompt_lengths
    first = np.cumsum(sizes) - sizes  # (K,) each group's first completion
    group_tokens = np.add.reduceat(layout.completion_lengths, first) if len(first) else first  # (K,)
    lp_starts = np.cumsum(group_tokens) - group_tokens  # (K,) where each group's log-probs start
    prompt_starts = lp_starts + np.cumsum(prompt_lengths) - prompt_lengths  # (K,) where its ids start
    finish = [FINISH_REASONS[code] for code in layout.finish_codes]
    groups = []
    for group_id, task, prompt_at, prompt_length, lp_at, num_tokens, c, size in zip(
        layout.group_ids, layout.tasks, prompt_starts.tolist(), prompt_lengths.tolist(), lp_starts.tolist(),
        group_tokens.tolist(), first.tolist(), sizes.tolist(), strict=True,
    ):
        ids_at = prompt_at + prompt_length
        columns = trusted(
            CompletionColumns,
            token_ids=ids[ids_at : ids_at + num_tokens],
            sampler_logprobs=logprobs[lp_at : lp_at + num_tokens],
            lengths=layout.completion_lengths[c : c + size],
            rewards=layout.rewards[c : c + size],
            finish_reasons=tuple(finish[c : c + size]),
            texts=None if texts is None else tuple(texts[c : c + size]),
        )
        groups.append(Group.from_columns(group_id, task, ids[prompt_at:ids_at], columns))
    return tuple(groups)
