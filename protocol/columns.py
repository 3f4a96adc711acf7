"""The token column of a batch: every token id and every quantised sampler log-prob, in one
compressed blob (every version); and the one zstd code path of the format (``deflate``, ``inflate``),
which the text column (``texts.py``) shares.

Layout before compression: the ids of the whole batch (each group's prompt, then its completions,
group after group) packed little-endian in ``id_width`` bytes each, then the quantised log-probs of
the completion tokens, q = round(−logprob / LOGPROB_STEP), packed little-endian in
``logprob_width`` bytes each. The blob is one zstd frame of that byte string, with its content size
and checksum in the frame header.

Why: plain packed arrays keep the format simple for other implementations; zstd finds the
repetition in token streams (neighbouring completions of a group share phrases; most log-probs are
near 0), which keeps ids + log-probs well under 4 bytes per token, and it inflates several hundred
MB/s on one core (README: wire size). Decoding never allocates more than the counts declared in the
batch imply: the frame must declare exactly that size before it is inflated.
"""

import threading

import numpy as np
import zstandard

from ftis.protocol.errors import DecodeError, EncodeError
from ftis.protocol.limits import LOGPROB_STEP, MIN_LOGPROB

COMPRESSION_LEVEL = 3
_local = threading.local()  # one ZstdDecompressor per thread: they are not thread-safe, and reuse saves ~5%


def id_width(vocab_size: int) -> int:
    """Bytes per token id for a vocabulary: 1, 2 or 3."""
    return 1 if vocab_size <= 1 << 8 else 2 if vocab_size <= 1 << 16 else 3


def quantize_logprobs(field: str, logprobs: np.ndarray) -> np.ndarray:
    """float log-probs (finite, ≤ 0, ≥ MIN_LOGPROB) -> uint32 q, logprob ≈ −q·LOGPROB_STEP."""
    values = np.asarray(logprobs, dtype=np.float64)
    if values.size and not np.all(np.isfinite(values)):
        raise EncodeError(field, "log-probs must be finite")
    if values.size and values.max() > 0:
        raise EncodeError(field, f"log-probs must be ≤ 0, got {float(values.max())}")
    if values.size and values.min() < MIN_LOGPROB:
        raise EncodeError(field, f"log-probs must be ≥ {MIN_LOGPROB}, got {float(values.min())}")
    return np.rint(-values / LOGPROB_STEP).astype(np.uint32)


def dequantize_logprobs(q: np.ndarray) -> np.ndarray:
    """uint32 q -> float32 log-probs; exact, since q < 2^24 and the step is a power of two."""
    logprobs = q.astype(np.float32)
    logprobs *= np.float32(LOGPROB_STEP)
    np.subtract(np.float32(0), logprobs, out=logprobs)  # 0 - x, not -x: q = 0 gives 0.0, never -0.0
    return logprobs


def logprob_width(q: np.ndarray) -> int:
    largest = int(q.max()) if q.size else 0
    return max(1, (largest.bit_length() + 7) // 8)


def _pack(values: np.ndarray, width: int) -> bytes:
    little = values.astype("<u4").view(np.uint8).reshape(-1, 4)  # (n, 4)
    return np.ascontiguousarray(little[:, :width]).tobytes()  # (n, width)


def _unpack(raw: bytes, offset: int, count: int, width: int, dtype: type) -> np.ndarray:
    if width in (1, 2, 4):
        return np.frombuffer(raw, f"<u{width}", count=count, offset=offset).astype(dtype)
    # Width 3, in one pass: read each value as the 4 bytes that start at it (a uint32 view that steps 3
    # bytes) and mask off the 4th, which belongs to the next value. The last value's 4th byte lies past
    # the end when nothing follows it, hence the padding byte. About 10x faster than copying into a
    # zero-padded (count, 4) array.
    assert width == 3, width
    buffer = raw if offset + 3 * count < len(raw) else raw + b"\0"
    values: np.ndarray = np.ndarray((count,), "<u4", buffer, offset, (3,)).astype(dtype)
    values &= 0xFFFFFF
    return values


def pack_columns(ids: np.ndarray, q: np.ndarray, ids_width: int, q_width: int) -> bytes:
    return deflate(_pack(ids, ids_width) + _pack(q, q_width))


def deflate(raw: bytes) -> bytes:
    """One zstd frame of ``raw``, its content size and checksum in the frame."""
    return zstandard.ZstdCompressor(level=COMPRESSION_LEVEL, write_checksum=True).compress(raw)


def _decompressor() -> zstandard.ZstdDecompressor:
    if not hasattr(_local, "decompressor"):
        _local.decompressor = zstandard.ZstdDecompressor()
    return _local.decompressor


def inflate(field: str, data: bytes, expected: int) -> bytes:
    """The content of the zstd frame ``data``, which must be exactly ``expected`` bytes (what the batch's
    counts imply). A frame that declares another size is refused before anything is inflated, so a small
    frame cannot make the decoder allocate more than the counts, which the limits bound, allow."""
    try:
        declared = zstandard.get_frame_parameters(data).content_size
    except zstandard.ZstdError as error:
        raise DecodeError(field, f"not a zstd frame ({error})") from None
    if declared != expected:
        raise DecodeError(field, f"declares {declared} bytes, the batch's counts imply {expected}")
    try:
        raw = _decompressor().decompress(data, max_output_size=expected, allow_extra_data=False)
    except zstandard.ZstdError as error:
        raise DecodeError(field, f"corrupt zstd frame ({error})") from None
    if len(raw) != expected:
        raise DecodeError(field, f"inflates to {len(raw)} bytes, the batch's counts imply {expected}")
    return raw


def unpack_columns(
    field: str, data: bytes, num_ids: int, num_logprobs: int, ids_width: int, q_width: int
) -> tuple[np.ndarray, np.ndarray]:
    """The blob -> (ids int64, q uint32). Refuses a frame whose declared size differs from what the
    batch's counts imply, before inflating anything."""
    raw = inflate(field, data, num_ids * ids_width + num_logprobs * q_width)
    ids = _unpack(raw, 0, num_ids, ids_width, np.int64)
    q = _unpack(raw, num_ids * ids_width, num_logprobs, q_width, np.uint32)
    return ids, q
