"""The fuzzer's judge: what must hold for every input a decoder is given.

- A refused input raises ``DecodeError`` naming a field, and nothing else (any other exception is a
  violation).
- An accepted input is checked against every limit of ``protocol/limits.py`` and docs/protocol.md, from the
  decoded object, independently of the decoder's own checks (``check_batch``, ``check_announcement``),
  and must survive ``decode(encode(x)) == x``.
- Decoding allocates at most ``memory_bound(data)`` bytes at its peak (tracemalloc), refused or not.

The memory bound is ``MEMORY_PER_BYTE·len(data) + MEMORY_PER_TOKEN·tokens + MEMORY_PER_TEXT_BYTE·text_bytes +
MEMORY_CONSTANT``, where ``tokens`` is what the message's own length columns claim, capped at ``MAX_BATCH_TOKENS``,
and ``text_bytes`` what its text column's lengths claim, capped at what the text bound allows for those tokens:
- per input byte (256): msgpack makes at most one Python object of each byte, and the decoder views
  binary columns in place; the worst shape is a list of empty maps, one byte each that becomes a dict
  (measured: 71 bytes per input byte);
- per token (32): the token column inflates to at most 6 bytes a token (3-byte ids, 3-byte log-probs),
  then becomes int64 ids, uint32 quantised log-probs and float32 log-probs (measured: 15 to 23 bytes),
  all only after the claimed counts passed the limits and the frame declared exactly them;
- per text byte (8): the text column inflates to exactly its lengths' sum (1 byte each), then becomes one str per
  completion (1 to 4 bytes a UTF-8 byte: a text of ASCII and one emoji is stored 4 bytes a character), again
  only after every length passed its bound and the frame declared their sum;
- the constant (256 KiB): the decoder's fixed working set (msgpack's 1024-level walk stack, a raised
  exception with its traceback; measured: 44 KiB).
What it rules out: allocating what a claimed length says before checking it against the input and the
limits (unchecked, 3 KB of nested array headers allocated 33 MB; ``envelope.check_shape`` checks them first).
"""

import math
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

from ftis.protocol import DecodeError, EncodeError, RolloutBatch, decode, encode
from ftis.protocol.announcement import Announcement, decode_announcement, encode_announcement
from ftis.protocol.limits import (
    ADAPTERS,
    FINISH_REASONS,
    LOGPROB_STEP,
    MAX_ANNOUNCED_BATCHES,
    MAX_ANNOUNCEMENT_BYTES,
    MAX_ANSWER_CHARS,
    MAX_BATCH_TOKENS,
    MAX_COMPLETION_TOKENS,
    MAX_GROUP_SIZE,
    MAX_GROUPS,
    MAX_NAME_CHARS,
    MAX_PAYLOAD_BYTES,
    MAX_PROMPT_TOKENS,
    MAX_ROUND,
    MAX_TEMPERATURE,
    MAX_TEXT_BYTES_PER_TOKEN,
    MAX_TEXT_SLACK_BYTES,
    MAX_VOCAB_SIZE,
    MIN_LOGPROB,
    MIN_TEMPERATURE,
    SHA256_BYTES,
)

INT64_MAX = (1 << 63) - 1
MEMORY_PER_BYTE = 256
MEMORY_PER_TOKEN = 32
MEMORY_PER_TEXT_BYTE = 8
MEMORY_CONSTANT = 256 * 1024


class Violation(AssertionError):
    """An input that broke a property the protocol promises."""


def expect(condition: bool, what: str) -> None:
    if not condition:
        raise Violation(what)


# --- limits of an accepted batch --------------------------------------------------------------------


def _name(value: Any, what: str, *, max_chars: int = MAX_NAME_CHARS, allow_empty: bool = False) -> None:
    expect(type(value) is str and len(value) <= max_chars and (allow_empty or value != ""),
           f"{what}: {'a' if allow_empty else 'a non-empty'} string of ≤ {max_chars} characters expected, got "
           f"{type(value).__name__} of length {len(value) if isinstance(value, str) else '-'}")


def _int(value: Any, low: int, high: int, what: str) -> None:
    expect(type(value) is int and low <= value <= high,
           f"{what}: an integer in [{low}, {high}] expected, got {value!r}")


def _number(value: Any, low: float, high: float, what: str) -> None:
    expect(type(value) is float and math.isfinite(value) and low <= value <= high,
           f"{what}: a finite float in [{low}, {high}] expected, got {value!r}")


def check_batch(batch: RolloutBatch, data: bytes) -> None:
    """Every limit holds for the accepted ``batch`` (decoded from ``data``), and it round-trips."""
    expect(isinstance(batch, RolloutBatch), f"decode returned a {type(batch).__name__}")
    expect(len(data) <= MAX_PAYLOAD_BYTES, f"accepted a payload of {len(data)} bytes")
    _name(batch.run_id, "run_id")
    _name(batch.peer_id, "peer_id")
    _int(batch.round, 0, MAX_ROUND, "seq")
    _number(batch.created_at, 0.0, math.inf, "created_at")
    policy, tokenizer, sampling = batch.policy, batch.tokenizer, batch.sampling
    _name(policy.model, "policy.model")
    _name(policy.revision, "policy.revision", allow_empty=True)
    expect(policy.adapter in ADAPTERS, f"policy.adapter {policy.adapter!r}")
    _int(policy.policy_version, 0, INT64_MAX, "policy.policy_version")
    _name(tokenizer.fingerprint, "tokenizer.fingerprint")
    _int(tokenizer.vocab_size, 1, MAX_VOCAB_SIZE, "tokenizer.vocab_size")
    _number(sampling.temperature, MIN_TEMPERATURE, MAX_TEMPERATURE, "sampling.temperature")
    _number(sampling.top_p, 0.0, 1.0, "sampling.top_p")
    expect(sampling.top_p > 0, "sampling.top_p must be positive")
    _int(sampling.top_k, 0, MAX_VOCAB_SIZE, "sampling.top_k")
    _int(sampling.max_new_tokens, 1, MAX_COMPLETION_TOKENS, "sampling.max_new_tokens")
    _int(len(batch.groups), 1, MAX_GROUPS, "number of groups")
    expect(len({group.group_id for group in batch.groups}) == len(batch.groups), "group ids must be unique")
    tokens = sum(_check_group(g, group, tokenizer.vocab_size, sampling.max_new_tokens)
                 for g, group in enumerate(batch.groups))
    with_texts = [group.columns.texts is not None for group in batch.groups]
    expect(all(with_texts) or not any(with_texts), f"texts in some groups only: {with_texts}")
    _int(tokens, 1, MAX_BATCH_TOKENS, "prompt + completion tokens in the batch")
    _round_trip(batch, encode, decode)


def _check_group(g: int, group: Any, vocab_size: int, max_new_tokens: int) -> int:
    """Check one group, its completions as columns (vectorised: the fuzzer runs this 100,000 times);
    its prompt + completion token count."""
    at = f"groups[{g}]"
    _name(group.group_id, f"{at}.group_id")
    _name(group.task.dataset, f"{at}.task.dataset")
    _name(group.task.split, f"{at}.task.split", allow_empty=True)
    _int(group.task.index, 0, INT64_MAX, f"{at}.task.index")
    _name(group.task.answer, f"{at}.task.answer", max_chars=MAX_ANSWER_CHARS, allow_empty=True)
    _int(group.size, 1, MAX_GROUP_SIZE, f"{at}: completions in the group")
    _check_ids(group.prompt_ids, vocab_size, f"{at}.prompt_ids")
    _int(len(group.prompt_ids), 1, MAX_PROMPT_TOKENS, f"{at}: prompt tokens")
    columns = group.columns
    lengths, ids, logprobs = columns.lengths, columns.token_ids, columns.sampler_logprobs
    expect(len(lengths) == len(columns.rewards) == len(columns.finish_reasons) == group.size,
           f"{at}: {len(lengths)} lengths, {len(columns.rewards)} rewards, {len(columns.finish_reasons)} finish "
           f"reasons for {group.size} completions")
    expect(bool(np.all((lengths >= 1) & (lengths <= max_new_tokens))),
           f"{at}: a completion length outside [1, max_new_tokens={max_new_tokens}]")
    _check_ids(ids, vocab_size, f"{at}.completions.token_ids")
    expect(int(lengths.sum()) == len(ids), f"{at}: lengths sum to {int(lengths.sum())}, {len(ids)} ids")
    expect(logprobs.shape == ids.shape, f"{at}: {logprobs.shape} log-probs for {ids.shape} ids")
    expect(logprobs.dtype == np.float32 and not logprobs.flags.writeable, f"{at}: log-probs not read-only float32")
    expect(bool(np.all(np.isfinite(logprobs) & (logprobs <= 0) & (logprobs >= MIN_LOGPROB))),
           f"{at}: a log-prob that is not finite in [{MIN_LOGPROB}, 0]")
    steps = -logprobs.astype(np.float64) / LOGPROB_STEP
    expect(bool(np.all(steps == np.round(steps))), f"{at}: a log-prob off the wire's grid")
    expect(bool(np.all(np.isfinite(columns.rewards))), f"{at}: a reward that is not finite")
    expect(set(columns.finish_reasons) <= set(FINISH_REASONS), f"{at}: finish reasons {set(columns.finish_reasons)}")
    if columns.texts is not None:
        _check_texts(at, columns.texts, lengths)
    return len(group.prompt_ids) + len(ids)


def _check_texts(at: str, texts: Any, lengths: np.ndarray) -> None:
    """One string a completion, each UTF-8 (no lone surrogate) within the bound for its tokens."""
    expect(type(texts) is tuple and len(texts) == len(lengths), f"{at}: texts not a tuple of one per completion")
    for c, (text, length) in enumerate(zip(texts, lengths.tolist(), strict=True)):
        expect(type(text) is str, f"{at}.completions[{c}].text: a {type(text).__name__}")
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise Violation(f"{at}.completions[{c}].text: not UTF-8 (a lone surrogate)") from None
        bound = MAX_TEXT_BYTES_PER_TOKEN * length + MAX_TEXT_SLACK_BYTES
        expect(size <= bound, f"{at}.completions[{c}].text: {size} bytes for {length} tokens, over {bound}")


def _check_ids(ids: np.ndarray, vocab_size: int, what: str) -> None:
    expect(isinstance(ids, np.ndarray) and ids.ndim == 1 and ids.dtype == np.int64, f"{what}: not a 1-D int64 array")
    expect(not ids.flags.writeable, f"{what}: a decoded array must be read-only")
    expect(bool(np.all((ids >= 0) & (ids < vocab_size))), f"{what}: an id outside [0, {vocab_size})")


# --- limits of an accepted announcement -------------------------------------------------------------


def check_announcement(announcement: Announcement, data: bytes) -> None:
    expect(isinstance(announcement, Announcement), f"decode_announcement returned a {type(announcement).__name__}")
    expect(len(data) <= MAX_ANNOUNCEMENT_BYTES, f"accepted an announcement of {len(data)} bytes")
    for what in ("run_id", "peer_id", "model", "tokenizer"):
        _name(getattr(announcement, what), what)
    expect(announcement.adapter in ADAPTERS, f"adapter {announcement.adapter!r}")
    for what in ("policy_version", "published_batches", "published_tokens"):
        _int(getattr(announcement, what), 0, INT64_MAX, what)
    _number(announcement.updated_at, 0.0, math.inf, "updated_at")
    _int(len(announcement.batches), 0, MAX_ANNOUNCED_BATCHES, "batches listed")
    for i, d in enumerate(announcement.batches):
        at = f"batches[{i}]"
        _int(d.round, 0, MAX_ROUND, f"{at}.seq")
        _int(d.groups, 1, MAX_GROUPS, f"{at}.groups")
        _int(d.tokens, 1, MAX_BATCH_TOKENS, f"{at}.tokens")
        _int(d.bytes, 1, MAX_PAYLOAD_BYTES, f"{at}.bytes")
        expect(type(d.sha256) is bytes and len(d.sha256) == SHA256_BYTES, f"{at}.sha256")
        _int(d.policy_version, 0, INT64_MAX, f"{at}.policy_version")
        _number(d.created_at, 0.0, math.inf, f"{at}.created_at")
    rounds = [d.round for d in announcement.batches]
    expect(len(set(rounds)) == len(rounds), "rounds must be unique")
    _round_trip(announcement, encode_announcement, decode_announcement)


def _round_trip(value: Any, encoder: Callable[[Any], bytes], decoder: Callable[[bytes], Any]) -> None:
    try:
        again = decoder(encoder(value))
    except (EncodeError, DecodeError) as error:
        raise Violation(f"accepted, but does not round-trip: {type(error).__name__} {error}") from None
    expect(again == value, "decode(encode(x)) differs from x")


# --- memory -----------------------------------------------------------------------------------------


def claimed_tokens(data: bytes) -> int:
    """The prompt + completion tokens ``data``'s length columns claim (0 if it has none), capped at the limit."""
    try:
        body = msgpack.unpackb(data, raw=False, strict_map_key=False)["body"]
        columns = [body["groups"]["prompt_length"], body["completions"]["length"]]
        total = sum(int(np.frombuffer(c, "<u4").astype(np.int64).sum()) for c in columns)
    except Exception:  # not a batch, or columns of another shape: nothing was claimed
        return 0
    return min(total, MAX_BATCH_TOKENS)


def claimed_text_bytes(data: bytes) -> int:
    """The text bytes ``data``'s text column claims (0 if it has none), capped at what the text bound allows
    for the completion tokens its length column claims."""
    try:
        body = msgpack.unpackb(data, raw=False, strict_map_key=False)["body"]
        lengths = np.frombuffer(body["completions"]["length"], "<u4").astype(np.int64)
        total = int(np.frombuffer(body["texts"]["length"], "<u4").astype(np.int64).sum())
    except Exception:  # no text column, or one of another shape: nothing was claimed
        return 0
    allowed = MAX_TEXT_BYTES_PER_TOKEN * min(int(lengths.sum()), MAX_BATCH_TOKENS) + MAX_TEXT_SLACK_BYTES * len(lengths)
    return min(total, allowed)


def memory_bound(data: bytes) -> int:
    return (MEMORY_PER_BYTE * len(data) + MEMORY_PER_TOKEN * claimed_tokens(data)
            + MEMORY_PER_TEXT_BYTE * claimed_text_bytes(data) + MEMORY_CONSTANT)


# --- one input --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    name: str
    decoder: Callable[[bytes], Any]
    check: Callable[[Any, bytes], None]


BATCH = Target("batch", decode, check_batch)
ANNOUNCEMENT = Target("announcement", decode_announcement, check_announcement)


@dataclass(frozen=True)
class Outcome:
    field: str | None  # the refusing DecodeError's field; None when the input was accepted
    peak: int  # bytes allocated at the peak of decoding (0 when not measured)
    bound: int  # what memory_bound allows (0 when not measured)


def judge(target: Target, data: bytes, *, measure: bool = True) -> Outcome:
    """Decode ``data`` and check every property; ``Violation`` if one breaks. With ``measure``, the
    peak allocation of decoding is measured and held to ``memory_bound``."""
    if measure:  # traced only while decoding: tracemalloc slows every allocation down 3 to 4 times
        if tracemalloc.is_tracing():
            raise RuntimeError("judge traces allocations itself: stop tracemalloc first")
        tracemalloc.start()
    try:
        value, field = target.decoder(data), None
    except DecodeError as error:
        value, field = None, error
    except Exception as error:
        raise Violation(f"{target.name} decoder raised {type(error).__name__}: {error}") from error
    finally:
        peak = tracemalloc.get_traced_memory()[1] if measure else 0
        tracemalloc.stop()
    if field is not None:
        expect(isinstance(field.field, str) and field.field != "", f"DecodeError without a field: {field!r}")
        field = field.field
    bound = memory_bound(data) if measure else 0
    expect(peak <= bound, f"decoding allocated {peak} bytes, over the bound of {bound} for {len(data)} bytes")
    if field is None:
        target.check(value, data)
    return Outcome(field, peak, bound)
