"""Protocol encoding of a ``RolloutBatch``, at ``PROTOCOL_VERSION`` (the wire layout is in ``decode.py``).

``encode`` checks what the format cannot represent (positive or non-finite log-probs, ids outside
the vocabulary, parts of a completion that do not match, texts in some groups but not in others, a text
too long for its tokens or not encodable as UTF-8), then validates by decoding what it
produced, so it never emits bytes that a peer would refuse; any failure is an ``EncodeError``
naming the field. Value checks run once over whole columns; only a failure walks the groups to name
the completion at fault.
"""

from typing import Any

import msgpack
import numpy as np

from ftis.protocol.columns import id_width, logprob_width, pack_columns, quantize_logprobs
from ftis.protocol.decode import KIND_BATCH, decode
from ftis.protocol.errors import DecodeError, EncodeError
from ftis.protocol.limits import FINISH_REASONS, MAX_LOGPROB_WIDTH, PROTOCOL_VERSION
from ftis.protocol.schema import CompletionColumns, Group, RolloutBatch
from ftis.protocol.texts import encode_texts, max_text_bytes, pack_texts


def encode(batch: RolloutBatch) -> bytes:
    """The protocol bytes of ``batch``."""
    vocab_size = batch.tokenizer.vocab_size
    if type(vocab_size) is not int:  # compared with every id below, so checked before decode would
        raise EncodeError("tokenizer.vocab_size", f"expected an integer, got {type(vocab_size).__name__}")
    columns = [_columns(g, group) for g, group in enumerate(batch.groups)]
    ids = _token_ids(batch.groups, columns, vocab_size)
    q = _quantized(batch.groups, columns)
    ids_width, q_width = id_width(vocab_size), logprob_width(q)
    if q_width > MAX_LOGPROB_WIDTH:  # unreachable after quantize's range check; kept as the invariant
        raise EncodeError("sampler_logprobs", "a log-prob is below the protocol's range")
    body = {
        "run_id": batch.run_id,
        "peer_id": batch.peer_id,
        "seq": batch.round,
        "created_at": batch.created_at,
        "policy": {
            "model": batch.policy.model,
            "revision": batch.policy.revision,
            "adapter": batch.policy.adapter,
            "policy_version": batch.policy.policy_version,
        },
        "tokenizer": {"fingerprint": batch.tokenizer.fingerprint, "vocab_size": vocab_size},
        "sampling": {
            "temperature": batch.sampling.temperature,
            "top_p": batch.sampling.top_p,
            "top_k": batch.sampling.top_k,
            "max_new_tokens": batch.sampling.max_new_tokens,
        },
        "groups": {
            "group_id": [group.group_id for group in batch.groups],
            "dataset": [group.task.dataset for group in batch.groups],
            "split": [group.task.split for group in batch.groups],
            "index": [group.task.index for group in batch.groups],
            "answer": [group.task.answer for group in batch.groups],
            "size": _u32([len(c) for c in columns]),
            "prompt_length": _u32([len(group.prompt_ids) for group in batch.groups]),
        },
        "completions": {
            "length": _u32(np.concatenate([c.lengths for c in columns]) if columns else []),
            "reward": np.concatenate([c.rewards for c in columns] or [np.zeros(0)]).astype("<f8").tobytes(),
            "finish_reason": bytes(FINISH_REASONS.index(reason) for c in columns for reason in c.finish_reasons),
        },
        "tokens": {
            "id_width": ids_width,
            "logprob_width": q_width,
            "data": pack_columns(ids, q, ids_width, q_width),
        },
    }
    texts = _texts(columns)
    if texts is not None:
        body["texts"] = pack_texts(texts)
    try:
        data = msgpack.packb(
            {"v": PROTOCOL_VERSION, "kind": KIND_BATCH, "body": body}, use_bin_type=True, default=_numpy_scalar
        )
    except (TypeError, ValueError, OverflowError) as error:  # a field of a type msgpack cannot carry
        raise EncodeError("batch", f"cannot be packed ({error})") from None
    try:
        decode(data)
    except DecodeError as error:
        raise EncodeError(error.field, error.reason) from None
    return data


def _columns(g: int, group: Group) -> CompletionColumns:
    try:
        return group.columns
    except EncodeError as error:
        raise EncodeError(f"groups[{g}].{error.field}", error.reason) from None


def _texts(columns: list[CompletionColumns]) -> list[bytes] | None:
    """Every completion's text as UTF-8, in wire order, or None when no group has texts (the batch carries
    none). A batch carries every completion's text or none: peers with another tokenizer use them all."""
    carried = [c.texts is not None for c in columns]
    if not any(carried):
        return None
    if not all(carried):
        g = next(g for g, has in enumerate(carried) if has != carried[0])
        raise EncodeError(f"groups[{g}].completions", f"{'carry' if carried[g] else 'carry no'} texts while group 0 "
                          f"{'does not' if carried[g] else 'does'}: a batch carries every completion's text or none")
    encoded = []
    for g, group_columns in enumerate(columns):
        assert group_columns.texts is not None
        if len(group_columns.texts) != len(group_columns):
            raise EncodeError(f"groups[{g}].completions", f"{len(group_columns.texts)} texts for "
                              f"{len(group_columns)} completions")
        group_texts = encode_texts(f"groups[{g}].completions", group_columns.texts)
        bounds = max_text_bytes(group_columns.lengths)
        for c, (text, bound) in enumerate(zip(group_texts, bounds.tolist(), strict=True)):
            if len(text) > bound:
                raise EncodeError(f"groups[{g}].completions[{c}].text", f"{len(text)} bytes of UTF-8 is over the "
                                  f"bound of {bound} for its {group_columns.lengths[c]} tokens")
        encoded += group_texts
    return encoded


def _token_ids(groups: tuple[Group, ...], columns: list[CompletionColumns], vocab_size: int) -> np.ndarray:
    """Every id of the batch in wire order (each group's prompt, then its completions)."""
    parts = []
    for g, (group, group_columns) in enumerate(zip(groups, columns, strict=True)):
        prompt_ids = np.asarray(group.prompt_ids)
        if prompt_ids.ndim != 1 or not (prompt_ids.dtype.kind in "iu" or prompt_ids.size == 0):
            raise EncodeError(f"groups[{g}].prompt_ids", "must be a 1-D array of integers")
        parts += [prompt_ids.astype(np.int64, copy=False), group_columns.token_ids]
    ids = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    outside = np.flatnonzero((ids < 0) | (ids >= vocab_size))
    if outside.size:
        field = _locate(int(outside[0]), groups, columns, with_prompts=True)
        raise EncodeError(f"{field}", f"token ids must be in [0, vocab_size={vocab_size}), got {int(ids[outside[0]])}")
    return ids


def _quantized(groups: tuple[Group, ...], columns: list[CompletionColumns]) -> np.ndarray:
    logprobs = np.concatenate([c.sampler_logprobs for c in columns]) if columns else np.zeros(0, np.float32)
    try:
        return quantize_logprobs("sampler_logprobs", logprobs)
    except EncodeError as error:  # name the completion at fault: the first whose values fail alone
        offsets = np.cumsum([0, *(len(c.sampler_logprobs) for c in columns)])
        for position in range(len(logprobs)):
            try:
                quantize_logprobs("", logprobs[position : position + 1])
            except EncodeError as single:
                field = _locate(position, groups, columns, with_prompts=False)
                raise EncodeError(f"{field.rsplit('.', 1)[0]}.sampler_logprobs", single.reason) from None
        raise AssertionError(f"{error} but no single value fails ({offsets[-1]} values)") from None


def _locate(position: int, groups: tuple[Group, ...], columns: list[CompletionColumns], *, with_prompts: bool) -> str:
    """The field holding element ``position`` of the batch's ids (``with_prompts``) or log-probs."""
    for g, (group, group_columns) in enumerate(zip(groups, columns, strict=True)):
        if with_prompts:
            if position < len(group.prompt_ids):
                return f"groups[{g}].prompt_ids"
            position -= len(group.prompt_ids)
        for c, length in enumerate(group_columns.lengths.tolist()):
            if position < length:
                return f"groups[{g}].completions[{c}].token_ids"
            position -= length
    raise AssertionError("position past the end of the batch")


def _u32(values: Any) -> bytes:
    return np.asarray(values, "<u4").tobytes()


def _numpy_scalar(value: Any) -> int | float:
    """Lets metadata be NumPy scalars (a generator's counters often are): they travel as plain numbers."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise TypeError(f"cannot encode {type(value).__name__}")
