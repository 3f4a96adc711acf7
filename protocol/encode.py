"""Protocol-v1 encoding of a ``RolloutBatch`` (the wire layout is described in ``decode.py``).

``encode`` checks what the format cannot represent (positive or non-finite log-probs, ids outside
the vocabulary, mismatched lengths), then validates by decoding what it produced, so it never emits
bytes that a peer would refuse; any failure is an ``EncodeError`` naming the field.
"""

import numbers
from typing import Any

import msgpack
import numpy as np

from ftis.protocol.columns import id_width, logprob_width, pack_columns, quantize_logprobs
from ftis.protocol.decode import KIND_BATCH, decode
from ftis.protocol.errors import DecodeError, EncodeError
from ftis.protocol.limits import FINISH_REASONS, MAX_LOGPROB_WIDTH, PROTOCOL_VERSION
from ftis.protocol.schema import RolloutBatch


def encode(batch: RolloutBatch) -> bytes:
    """The protocol-v1 bytes of ``batch``."""
    vocab_size = batch.tokenizer.vocab_size
    if type(vocab_size) is not int:  # compared with every id below, so checked before decode would
        raise EncodeError("tokenizer.vocab_size", f"expected an integer, got {type(vocab_size).__name__}")
    ids, quantized = [], []
    for g, group in enumerate(batch.groups):
        ids.append(_ids(f"groups[{g}].prompt_ids", group.prompt_ids, vocab_size))
        for c, completion in enumerate(group.completions):
            field = f"groups[{g}].completions[{c}]"
            if completion.finish_reason not in FINISH_REASONS:
                raise EncodeError(f"{field}.finish_reason", f"must be one of {FINISH_REASONS}")
            token_ids = _ids(f"{field}.token_ids", completion.token_ids, vocab_size)
            if np.shape(completion.sampler_logprobs) != token_ids.shape:
                raise EncodeError(field, "token_ids and sampler_logprobs differ in length")
            if np.asarray(completion.sampler_logprobs).dtype.kind not in "fiu":  # numpy would parse strings
                raise EncodeError(f"{field}.sampler_logprobs", "must be an array of numbers")
            if not isinstance(completion.reward, numbers.Real):  # likewise: "1.5" must not become 1.5
                raise EncodeError(f"{field}.reward", f"expected a number, got {type(completion.reward).__name__}")
            ids.append(token_ids)
            quantized.append(quantize_logprobs(f"{field}.sampler_logprobs", completion.sampler_logprobs))
    all_ids = np.concatenate(ids) if ids else np.zeros(0, np.uint32)
    q = np.concatenate(quantized) if quantized else np.zeros(0, np.uint32)
    ids_width, q_width = id_width(vocab_size), logprob_width(q)
    if q_width > MAX_LOGPROB_WIDTH:
        raise EncodeError("sampler_logprobs", "a log-prob is below the protocol's range")
    completions = [c for group in batch.groups for c in group.completions]
    body = {
        "run_id": batch.run_id,
        "peer_id": batch.peer_id,
        "seq": batch.seq,
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
            "size": _u32([len(group.completions) for group in batch.groups]),
            "prompt_length": _u32([len(group.prompt_ids) for group in batch.groups]),
        },
        "completions": {
            "length": _u32([len(c.token_ids) for c in completions]),  # len: _ids accepted any 1-D sequence
            "reward": np.array([c.reward for c in completions], "<f8").tobytes(),
            "finish_reason": bytes(FINISH_REASONS.index(c.finish_reason) for c in completions),
        },
        "tokens": {
            "id_width": ids_width,
            "logprob_width": q_width,
            "data": pack_columns(all_ids, q, ids_width, q_width),
        },
    }
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


def _ids(field: str, values: Any, vocab_size: int) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1 or not (array.dtype.kind in "iu" or array.size == 0):
        raise EncodeError(field, "must be a 1-D array of integers")
    if array.size and (array.min() < 0 or array.max() >= vocab_size):
        raise EncodeError(field, f"token ids must be in [0, vocab_size={vocab_size})")
    return array.astype(np.uint32)


def _u32(values: list[int]) -> bytes:
    return np.array(values, "<u4").tobytes()


def _numpy_scalar(value: Any) -> int | float:
    """Lets metadata be NumPy scalars (a generator's counters often are): they travel as plain numbers."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    raise TypeError(f"cannot encode {type(value).__name__}")
