"""Fuzzing inputs for the protocol: valid seed messages of several shapes, and the mutations that
corrupt them, byte by byte or value by value in the unpacked msgpack structure.

Used by ``tests/test_fuzz.py`` (a few thousand inputs), ``tests/test_protocol_malformed.py`` and
``benchmarks/fuzz.py`` (``python -m benchmarks.fuzz``, 100,000+ inputs). It imports only the protocol,
NumPy, msgpack and zstandard.

``mutate(rng, seeds)`` returns ``(kind, bytes)``: the name of the mutation (``MUTATIONS``) and the
mutated message. Structure-level mutations unpack a seed, change one to three values and pack it
again; ``recount`` also rewrites the token column as a valid frame of the size the changed counts
imply, so that decoding gets past the frame check and reaches the checks behind it (and the text column, when
the batch carries one, the size its lengths imply).
"""

import copy
import math
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import msgpack
import numpy as np
import zstandard

from ftis.protocol import (
    Completion,
    Group,
    PolicyInfo,
    RolloutBatch,
    SamplingSettings,
    TaskRef,
    TokenizerInfo,
    encode,
)
from ftis.protocol.announcement import Announcement, BatchDescriptor, Reach, encode_announcement
from ftis.protocol.limits import (
    LOGPROB_STEP,
    MAX_ANNOUNCED_BATCHES,
    MAX_ANSWER_CHARS,
    MAX_BATCH_TOKENS,
    MAX_COMPLETION_TOKENS,
    MAX_GROUP_SIZE,
    MAX_GROUPS,
    MAX_NAME_CHARS,
    MAX_PAYLOAD_BYTES,
    MAX_PROMPT_TOKENS,
    MAX_ROUND,
    MAX_VOCAB_SIZE,
    MIN_LOGPROB,
)

T0 = 1_700_000_000.5
INT64_MAX = (1 << 63) - 1
MAX_REFRAMED_BYTES = 1 << 20  # ``recount`` makes frames up to this size (bigger: the fuzz run slows down)

# --- seeds ------------------------------------------------------------------------------------------


def seed_batch(
    *,
    vocab_size: int = 200,
    prompt_lengths: tuple[int, ...] = (4, 2),
    group_sizes: tuple[int, ...] = (2, 3),
    max_new_tokens: int = 8,
    adapter: str = "lora",
    ids: Callable[[np.random.Generator, int], np.ndarray] | None = None,
    logprobs: Callable[[np.random.Generator, int], np.ndarray] | None = None,
    texts: Callable[[np.random.Generator, int], str] | None = None,
    seed: int = 0,
    **fields: Any,
) -> RolloutBatch:
    """A valid batch: groups of the given prompt lengths and sizes, completions of 1 to
    ``max_new_tokens`` tokens; ``ids``/``logprobs`` make a completion's values from (rng, length)
    (default: ids spread over the vocabulary, its top id included; log-probs on the wire's grid); ``texts``
    its text (default: none, the batch carries no texts)."""
    rng = np.random.default_rng(seed)
    ids = ids or (lambda r, n: np.append(r.integers(0, vocab_size, n - 1), vocab_size - 1))
    logprobs = logprobs or (lambda r, n: -r.integers(0, 4096, n) * LOGPROB_STEP)
    groups = []
    for g, (prompt_length, size) in enumerate(zip(prompt_lengths, group_sizes, strict=True)):
        completions = []
        for c in range(size):
            n = int(rng.integers(1, max_new_tokens + 1))
            text = texts(rng, n) if texts is not None else None
            completions.append(Completion(ids(rng, n), logprobs(rng, n), float(c % 3) - 0.5, ("stop", "length")[c % 2],
                                          text))
        task = TaskRef("arith", "train", g, str(g))
        groups.append(Group(f"g{g}", task, rng.integers(0, vocab_size, prompt_length), tuple(completions)))
    batch = dict(run_id="run-1", peer_id="peer-a", round=7, created_at=T0,
                 policy=PolicyInfo("Qwen/Qwen2.5-0.5B", "main", adapter, 3),
                 tokenizer=TokenizerInfo("sha256:abc", vocab_size),
                 sampling=SamplingSettings(0.9, 0.95, 50, max_new_tokens), groups=tuple(groups))
    return RolloutBatch(**{**batch, **fields})


def _at_the_limits() -> RolloutBatch:
    """Every string and number at its limit: names of MAX_NAME_CHARS (4-byte characters), an answer of
    MAX_ANSWER_CHARS 4-byte characters (exactly msgpack's string limit), empty revision, split and
    answer, completions of up to max_new_tokens, and the top round and task index."""
    batch = seed_batch(vocab_size=1 << 16, prompt_lengths=(3, 1), group_sizes=(1, 16), max_new_tokens=4,
                       adapter="full", round=MAX_ROUND, created_at=0.0, run_id="🙂" * MAX_NAME_CHARS)
    long_answer = batch.groups[0].replace(
        group_id="é" * MAX_NAME_CHARS, task=TaskRef("d" * MAX_NAME_CHARS, "", INT64_MAX, "🙂" * MAX_ANSWER_CHARS))
    empty_answer = batch.groups[1].replace(task=TaskRef("arith", "s" * MAX_NAME_CHARS, 0, ""))
    return replace(batch, groups=(long_answer, empty_answer), policy=PolicyInfo("m" * MAX_NAME_CHARS, "", "full",
                                                                               INT64_MAX))


_TEXT_PIECES = ["a", " ", "\n", "é", "ß", "—", "漢", "字", "🙂", "\x00", "\u200d", "\U0010ffff"]  # 1 to 4 UTF-8 bytes


def _text(rng: np.random.Generator, n: int) -> str:
    """A completion's text: 0 to 3 pieces a token, of characters 1 to 4 UTF-8 bytes long (an empty text too)."""
    return "".join(rng.choice(_TEXT_PIECES, int(rng.integers(0, 3 * n + 1))).tolist())


def batch_seeds() -> dict[str, bytes]:
    """Valid messages of several shapes, by name."""
    repeated = np.array([5, 6, 7, 8] * 64)
    extremes = np.array([MIN_LOGPROB, 0.0, -LOGPROB_STEP, -LOGPROB_STEP / 2 + 1e-9, -1.0])
    return {
        "small": encode(seed_batch()),
        "wide_ids": encode(seed_batch(vocab_size=MAX_VOCAB_SIZE, group_sizes=(3, 1), seed=1)),
        "qwen_vocab": encode(seed_batch(vocab_size=151_936, prompt_lengths=(30,), group_sizes=(8,),
                                        max_new_tokens=40, seed=2)),
        "extreme_logprobs": encode(seed_batch(vocab_size=256, logprobs=lambda r, n: r.choice(extremes, n), seed=3)),
        "many_groups": encode(seed_batch(vocab_size=256, prompt_lengths=(2,) * 40, group_sizes=(1,) * 40,
                                         max_new_tokens=3, adapter="full", seed=4)),
        "big_group": encode(seed_batch(vocab_size=1000, prompt_lengths=(6,), group_sizes=(64,), max_new_tokens=5,
                                       seed=5)),
        "compressed": encode(seed_batch(vocab_size=50_000, prompt_lengths=(40, 40, 40), group_sizes=(8, 8, 8),
                                        max_new_tokens=256, ids=lambda r, n: repeated[:n],
                                        logprobs=lambda r, n: np.zeros(n), seed=6)),
        "at_the_limits": encode(_at_the_limits()),
        "texts": encode(seed_batch(vocab_size=151_936, prompt_lengths=(5, 3, 8), group_sizes=(4, 1, 3),
                                   max_new_tokens=12, texts=_text, seed=7)),
    }


def seed_announcement(count: int = 3, **fields: Any) -> Announcement:
    descriptors = tuple(
        BatchDescriptor(round=100 + i, groups=1 + i, tokens=1_000 * (i + 1), bytes=2_000 * (i + 1),
                        sha256=bytes([i]) * 32, policy_version=i, created_at=T0 - i)
        for i in range(count)
    )
    announcement = dict(run_id="run-1", peer_id="peer-a", model="Qwen/Qwen2.5-0.5B", adapter="lora",
                        tokenizer="sha256:abc", policy_version=3, published_batches=count,
                        published_tokens=1_000 * count, updated_at=T0, batches=descriptors)
    return Announcement(**{**announcement, **fields})


def announcement_seeds() -> dict[str, bytes]:
    at_limits = seed_announcement(0, run_id="r" * MAX_NAME_CHARS, peer_id="p" * MAX_NAME_CHARS, adapter="full",
                                  policy_version=INT64_MAX, published_batches=INT64_MAX, updated_at=0.0)
    extreme = BatchDescriptor(round=MAX_ROUND, groups=MAX_GROUPS, tokens=MAX_BATCH_TOKENS, bytes=MAX_PAYLOAD_BYTES,
                              sha256=b"\xff" * 32, policy_version=INT64_MAX, created_at=1e11)
    full = seed_announcement(MAX_ANNOUNCED_BATCHES - 1)
    return {
        "announcement": encode_announcement(seed_announcement()),
        "announcement_empty": encode_announcement(at_limits),
        "announcement_full": encode_announcement(replace(full, batches=(*full.batches, extreme))),
        "announcement_relayed": encode_announcement(seed_announcement(2, reach=Reach("relayed", tuple(
            f"/ip4/203.0.113.{i}/tcp/4001/p2p/12D3KooW{'x' * 30}{i}/p2p-circuit" for i in range(1, 4))))),
    }


# --- values that sit on or next to a limit ----------------------------------------------------------

INTERESTING_VALUES = [
    0, 1, -1, 2, 255, 256, 2**31, 2**32 - 1, 2**63 - 1, 2**64 - 1, -(2**63), 0.0, -0.0, 0.5, 1e300, math.nan,
    math.inf, -math.inf, True, False, None, "", "x", "g0", "é" * 300, b"", b"\x00", b"\xff" * 7, bytes(40), [], [0],
    ["g0", "g0"], {}, {"v": 1}, msgpack.ExtType(3, b""), msgpack.ExtType(3, b"abc"),
]  # fmt: skip

_LIMITS = [MAX_GROUPS, MAX_GROUP_SIZE, MAX_PROMPT_TOKENS, MAX_COMPLETION_TOKENS, MAX_BATCH_TOKENS, MAX_VOCAB_SIZE,
           MAX_NAME_CHARS, MAX_ANSWER_CHARS, MAX_ANNOUNCED_BATCHES, MAX_PAYLOAD_BYTES, 1 << 8, 1 << 16, 1 << 32,
           1 << 63]
BOUNDARY_INTS = sorted({v + d for v in [0, 1, *_LIMITS] for d in (-1, 0, 1)})
BOUNDARY_FLOATS = [0.0, -0.0, 1e-6, 1e-9, 1e-10, 1.0, 1.0000001, 1e3, 1e3 + 1e-9, 1e11, 1e11 * (1 + 1e-15), 5e-324,
                   -5e-324, MIN_LOGPROB, math.nan, math.inf, -math.inf]


def _boundary(rng: random.Random, value: Any) -> Any:
    """A value of the same type as ``value`` that sits on or next to one of the protocol's limits."""
    if type(value) is int:
        return rng.choice(BOUNDARY_INTS)
    if type(value) is float:
        return rng.choice(BOUNDARY_FLOATS)
    if type(value) is str:
        return rng.choice("aé🙂") * rng.choice([MAX_NAME_CHARS, MAX_NAME_CHARS + 1, MAX_ANSWER_CHARS,
                                                MAX_ANSWER_CHARS + 1, 0, 1])
    if type(value) is bytes and value and len(value) % 4 == 0:  # a uint32 column: one entry on a limit
        column = bytearray(value)
        at = 4 * rng.randrange(len(value) // 4)
        column[at : at + 4] = (rng.choice(BOUNDARY_INTS) % (1 << 32)).to_bytes(4, "little")
        return bytes(column)
    return rng.choice(INTERESTING_VALUES)


# --- helpers over unpacked messages -----------------------------------------------------------------


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def pack(message: Any) -> bytes:
    return msgpack.packb(message, use_bin_type=True)


def zstd(raw: bytes, **options: Any) -> bytes:
    return zstandard.ZstdCompressor(write_checksum=True, **options).compress(bytes(raw))


def all_nodes(node: Any) -> list[tuple[Any, Any]]:
    """(container, key) of every value in ``node``, nested ones included."""
    found = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        found.append((node, key))
        found += all_nodes(value)
    return found


def retokenize(rng: random.Random, data: Any) -> Any:
    """``data`` as a valid zstd frame with one byte of its content replaced, when it is a frame."""
    try:
        raw = bytearray(zstandard.ZstdDecompressor().decompress(data))
    except (zstandard.ZstdError, TypeError):
        return data
    if raw:
        raw[rng.randrange(len(raw))] = rng.randrange(256)
    return zstd(raw)


def _implied_column_bytes(body: Any) -> int | None:
    """The token column's size that ``body``'s counts and widths imply, or None if they cannot be read."""
    try:
        prompts = int(np.frombuffer(body["groups"]["prompt_length"], "<u4").astype(np.int64).sum())
        lengths = int(np.frombuffer(body["completions"]["length"], "<u4").astype(np.int64).sum())
        id_width, logprob_width = int(body["tokens"]["id_width"]), int(body["tokens"]["logprob_width"])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    return (prompts + lengths) * id_width + lengths * logprob_width


def reframe(rng: random.Random, body: Any) -> None:
    """Rewrite ``body``'s token column as a valid frame of the size its counts imply: the original
    content cut or extended by repeating it (so most ids stay below the vocabulary size)."""
    size = _implied_column_bytes(body)
    if size is None or not 0 <= size <= MAX_REFRAMED_BYTES:
        return
    try:
        raw = zstandard.ZstdDecompressor().decompress(body["tokens"]["data"])
    except (zstandard.ZstdError, TypeError, KeyError):
        raw = b""
    raw = (raw or rng.randbytes(8)) * (size // max(len(raw), 1) + 1)
    body["tokens"]["data"] = zstd(raw[:size])


def _retext(texts: dict, n: int) -> None:
    """The text column resized to ``n`` completions: its lengths repeated or cut, its frame remade to match
    (its content repeated or cut, so most texts stay valid UTF-8 but some are cut inside a character)."""
    lengths = np.resize(np.frombuffer(texts["length"], "<u4"), n).astype("<u4")
    size = int(lengths.astype(np.int64).sum())
    if size > MAX_REFRAMED_BYTES:
        return
    try:
        raw = zstandard.ZstdDecompressor().decompress(texts["data"])
    except (zstandard.ZstdError, TypeError, KeyError):
        raw = b""
    texts["length"] = lengths.tobytes()
    texts["data"] = zstd(((raw or b"x") * (size // max(len(raw), 1) + 1))[:size])


def _recount(rng: random.Random, body: dict) -> None:
    """Change the batch's counts (group sizes, prompt or completion lengths, or the widths), keeping the
    columns that follow them the right length where possible; ``reframe`` then matches the frame."""
    groups, completions, tokens = body["groups"], body["completions"], body["tokens"]
    sizes = np.frombuffer(groups["size"], "<u4").astype(np.int64)
    choice = rng.randrange(4)
    if choice == 0 and len(sizes):  # a group gains or loses completions: the completion columns follow
        g = rng.randrange(len(sizes))
        sizes[g] = max(0, sizes[g] + rng.choice([-1, 1, 2, MAX_GROUP_SIZE]))
        n = int(sizes.sum())
        groups["size"] = sizes.astype("<u4").tobytes()
        lengths = np.resize(np.frombuffer(completions["length"], "<u4"), n)
        completions["length"] = lengths.astype("<u4").tobytes()
        completions["reward"] = np.resize(np.frombuffer(completions["reward"], "<f8"), n).tobytes()
        completions["finish_reason"] = bytes(np.resize(np.frombuffer(completions["finish_reason"], "u1"), n))
        if isinstance(body.get("texts"), dict) and isinstance(body["texts"].get("length"), bytes):
            _retext(body["texts"], n)
    elif choice == 1:  # a prompt or completion length changes
        key, table = rng.choice([("prompt_length", groups), ("length", completions)])
        column = np.frombuffer(table[key], "<u4").astype(np.int64)
        if len(column):
            at = rng.randrange(len(column))
            column[at] = max(0, column[at] + rng.choice([-1, 1, 7, -(1 << 20), 1 << 20]))
            table[key] = column.astype("<u4").tobytes()
    elif choice == 2:
        tokens["id_width"] = rng.choice([1, 2, 3, 4])
    else:
        tokens["logprob_width"] = rng.choice([1, 2, 3, 4])


# --- mutations --------------------------------------------------------------------------------------


def _bit_flip(rng: random.Random, data: bytearray, seeds: list[bytes]) -> bytearray:
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return data


def _insert(rng: random.Random, data: bytearray, seeds: list[bytes]) -> bytearray:
    at = rng.randrange(len(data) + 1)
    data[at:at] = rng.randbytes(rng.randint(1, 8))
    return data


def _delete(rng: random.Random, data: bytearray, seeds: list[bytes]) -> bytearray:
    at = rng.randrange(len(data))
    del data[at : at + rng.randint(1, 8)]
    return data


def _truncate(rng: random.Random, data: bytearray, seeds: list[bytes]) -> bytearray:
    del data[rng.randrange(len(data)) :]
    return data


def _splice(rng: random.Random, data: bytearray, seeds: list[bytes]) -> bytearray:
    other = rng.choice(seeds)
    return data[: rng.randrange(len(data))] + other[rng.randrange(len(other)) :]


def _overwrite(rng: random.Random, data: bytearray, seeds: list[bytes]) -> bytearray:
    at = rng.randrange(len(data))
    data[at : at + 4] = rng.randbytes(4)
    return data


BYTE_MUTATIONS = {"bit_flip": _bit_flip, "insert": _insert, "delete": _delete, "truncate": _truncate,
                  "splice": _splice, "overwrite": _overwrite}

# Headers that claim a length: array 16/32, map 16/32, str 8/16/32, bin 8/16/32 (msgpack spec).
_CLAIMS = [(0xDC, 2), (0xDD, 4), (0xDE, 2), (0xDF, 4), (0xD9, 1), (0xDA, 2), (0xDB, 4), (0xC4, 1), (0xC5, 2),
           (0xC6, 4)]
_MARKER = "\x00length claims go here\x00"


def _length_claim(rng: random.Random, seed: bytes) -> bytes:
    """Put 1 to 1000 nested container or string headers in place of one value of ``seed``, each claiming a
    length the input does not hold (the largest the decoder's limits allow, or more): a decoder must not
    allocate what they claim."""
    message = unpack(seed)
    container, key = rng.choice(all_nodes(message))
    container[key] = _MARKER
    tag, width = rng.choice(_CLAIMS)
    claim = rng.choice([MAX_GROUPS, MAX_GROUPS, 32, 4 * MAX_ANSWER_CHARS, (1 << 8 * width) - 1,
                        rng.randrange(1 << 8 * width)]) % (1 << 8 * width)
    headers = (bytes([tag]) + claim.to_bytes(width, "big")) * rng.choice([1, 8, 64, 512, 1000])
    return pack(message).replace(pack(_MARKER), headers, 1)


def _structure(kind: str, rng: random.Random, message: Any, seeds: list[bytes]) -> None:
    """Mutate the unpacked ``message`` in place: ``kind`` says how."""
    body = message.get("body") if isinstance(message, dict) else None
    is_batch = isinstance(body, dict) and "tokens" in body
    if kind == "recount" and is_batch:
        _recount(rng, body)
        reframe(rng, body)
        return
    nodes = [(container, key) for container, key in all_nodes(message) if _applies(kind, container, container[key])]
    for _ in range(rng.randint(1, 3) if nodes else 0):
        container, key = rng.choice(nodes)
        value = container[key]
        if kind == "swap_value":  # another seed's value, from anywhere in it
            donor, donor_key = rng.choice(all_nodes(unpack(rng.choice(seeds))))
            container[key] = copy.deepcopy(donor[donor_key])
        elif kind == "interesting_value":
            container[key] = rng.choice(INTERESTING_VALUES)
        elif kind == "boundary_value":
            container[key] = _boundary(rng, value)
        elif kind == "drop_key":
            del container[key]
            return
        elif kind == "add_key":
            container[rng.choice(["x", "v", "body", "seq", 0, b"k"])] = rng.choice(INTERESTING_VALUES)
            return
        elif kind == "wrap":
            container[key] = rng.choice([[value], {"value": value}, [value, value]])
        elif kind == "column_bit_flip":
            column = bytearray(value)
            column[rng.randrange(len(column))] ^= 1 << rng.randrange(8)
            container[key] = bytes(column)
    if kind == "retokenize" and is_batch:  # a valid frame of the same size, one byte of its content changed
        column = body["texts"] if isinstance(body.get("texts"), dict) and rng.random() < 0.5 else body["tokens"]
        if isinstance(column, dict) and "data" in column:
            column["data"] = retokenize(rng, column["data"])
    elif is_batch and kind in ("boundary_value", "swap_value") and rng.random() < 0.5:
        reframe(rng, body)  # counts may have changed: let the frame follow, so later checks are reached


def _applies(kind: str, container: Any, value: Any) -> bool:
    if kind in ("drop_key", "add_key"):
        return isinstance(container, dict)
    if kind == "column_bit_flip":
        return isinstance(value, bytes) and bool(value)
    return True


STRUCTURE_MUTATIONS = ["swap_value", "interesting_value", "boundary_value", "drop_key", "add_key", "wrap",
                       "column_bit_flip", "retokenize", "recount"]
MUTATIONS = [*BYTE_MUTATIONS, "length_claim", *STRUCTURE_MUTATIONS, "stacked"]
ANNOUNCEMENT_MUTATIONS = [kind for kind in MUTATIONS if kind not in ("retokenize", "recount")]  # no token column


def mutate(rng: random.Random, seeds: list[bytes], kinds: list[str] = MUTATIONS) -> tuple[str, bytes]:
    """One mutated message from the valid ``seeds``: (the mutation's name, the bytes), by one of ``kinds``."""
    kind = rng.choice(kinds)
    seed = rng.choice(seeds)
    if kind in BYTE_MUTATIONS:
        return kind, bytes(BYTE_MUTATIONS[kind](rng, bytearray(seed), seeds))
    if kind == "length_claim":
        return kind, _length_claim(rng, seed)
    if kind == "stacked":  # a value changed, then the bytes corrupted
        data = _mutate_structure(rng.choice([k for k in STRUCTURE_MUTATIONS if k in kinds]), rng, seed, seeds)
        for _ in range(rng.randint(1, 2)):
            data = BYTE_MUTATIONS[rng.choice(list(BYTE_MUTATIONS))](rng, bytearray(data or b"\x00"), seeds)
        return kind, bytes(data)
    return kind, _mutate_structure(kind, rng, seed, seeds)


def _mutate_structure(kind: str, rng: random.Random, seed: bytes, seeds: list[bytes]) -> bytes:
    message = unpack(seed)
    _structure(kind, rng, message, seeds)
    return pack(message)
