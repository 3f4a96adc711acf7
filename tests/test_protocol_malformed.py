"""The protocol refuses malformed input: every bad message raises ``DecodeError`` (and nothing else)
naming the field, and ``encode`` refuses what the wire cannot carry with ``EncodeError``.

Run: python -m pytest tests/test_protocol_malformed.py -q

Bad messages are made from a valid one: unpack it with msgpack, change one thing, pack it again
(``mutated``), so each case differs from a valid message in exactly the way its name says. The last
test is a seeded mutation fuzzer: thousands of random corruptions, each of which must decode or raise
``DecodeError`` (the mutator is shared: ``benchmarks/fuzzing/inputs.py``).
"""

import dataclasses
import importlib
import math
import random
from typing import Any

import msgpack
import numpy as np
import pytest
import zstandard

from benchmarks.fuzzing.inputs import mutate
from ftis.protocol import (
    Completion,
    DecodeError,
    EncodeError,
    Group,
    PolicyInfo,
    RolloutBatch,
    SamplingSettings,
    TaskRef,
    TokenizerInfo,
    decode,
    encode,
)
from ftis.protocol.limits import (
    MAX_ANSWER_CHARS,
    MAX_BATCH_TOKENS,
    MAX_DEPTH,
    MAX_GROUP_SIZE,
    MAX_GROUPS,
    MAX_MAP_ENTRIES,
    MAX_NAME_CHARS,
    MAX_PROMPT_TOKENS,
    MAX_ROUND,
    MAX_TEMPERATURE,
    MAX_VOCAB_SIZE,
    MIN_LOGPROB,
    MIN_TEMPERATURE,
)

decode_module = importlib.import_module("ftis.protocol.decode")  # the package's ``decode`` is the function

# --- a valid batch and its message ------------------------------------------------------------------

PROMPT_LENGTHS = [4, 2]  # two groups
COMPLETION_LENGTHS = [[3, 1], [4, 2, 5]]  # of sizes 2 and 3
MAX_NEW_TOKENS = 8


def replace(obj, **changes):
    """dataclasses.replace, and Group.replace for groups (a Group is not a dataclass)."""
    return obj.replace(**changes) if isinstance(obj, Group) else dataclasses.replace(obj, **changes)


def make_batch(vocab_size: int = 200, high_id: int = 199) -> RolloutBatch:
    """Two groups (2 and 3 completions); ids are small except one ``high_id`` per completion."""
    groups = []
    reward = 0.0
    for g, (prompt_length, lengths) in enumerate(zip(PROMPT_LENGTHS, COMPLETION_LENGTHS, strict=True)):
        completions = []
        for c, length in enumerate(lengths):
            ids = (np.arange(length) + 10 * c) % 100
            ids[-1] = high_id
            logprobs = -np.linspace(0.0, 3.0, length)
            completions.append(Completion(ids, logprobs, reward, "stop" if c % 2 else "length"))
            reward += 0.5
        task = TaskRef("arith", "train", g, str(g))
        groups.append(Group(f"g{g}", task, np.arange(prompt_length) + 1, tuple(completions)))
    return RolloutBatch(
        run_id="run-1",
        peer_id="peer-a",
        round=7,
        created_at=1_700_000_000.5,
        policy=PolicyInfo("Qwen/Qwen2.5-0.5B", "main", "lora", 3),
        tokenizer=TokenizerInfo("sha256:abc", vocab_size),
        sampling=SamplingSettings(0.9, 0.95, 50, MAX_NEW_TOKENS),
        groups=tuple(groups),
    )


VALID = encode(make_batch())
NUM_IDS = sum(PROMPT_LENGTHS) + sum(map(sum, COMPLETION_LENGTHS))
GROUP_1_START = PROMPT_LENGTHS[0] + sum(COMPLETION_LENGTHS[0])  # first id of group 1 in the token column


# --- helpers ----------------------------------------------------------------------------------------


def unpack(data: bytes) -> dict:
    return msgpack.unpackb(data, raw=False)


def pack(message: Any) -> bytes:
    return msgpack.packb(message, use_bin_type=True)


def parent_of(message: dict, path: str) -> tuple[dict, str]:
    *parents, key = path.split(".")
    node = message
    for name in parents:
        node = node[name]
    return node, key


def mutated(path: str, value: Any, base: bytes = VALID) -> bytes:
    """``base`` with the field at ``path`` (``body.groups.size``) set to ``value``."""
    message = unpack(base)
    node, key = parent_of(message, path)
    node[key] = value
    return pack(message)


def without(path: str, base: bytes = VALID) -> bytes:
    message = unpack(base)
    node, key = parent_of(message, path)
    del node[key]
    return pack(message)


def field_of(path: str, base: bytes = VALID) -> Any:
    node, key = parent_of(unpack(base), path)
    return node[key]


def decode_error(data: Any) -> DecodeError:
    """The ``DecodeError`` that decoding ``data`` raises; any other exception fails the test."""
    with pytest.raises(DecodeError) as info:
        decode(data)
    return info.value


def u32(values: list[int]) -> bytes:
    return np.array(values, "<u4").tobytes()


def f64(values: list[float]) -> bytes:
    return np.array(values, "<f8").tobytes()


def raw_tokens(base: bytes = VALID) -> bytearray:
    """The token column of ``base``, inflated."""
    return bytearray(zstandard.ZstdDecompressor().decompress(field_of("body.tokens.data", base)))


def zstd(raw: bytes, **options: Any) -> bytes:
    return zstandard.ZstdCompressor(write_checksum=True, **options).compress(bytes(raw))


def pack_pairs(pairs: list[tuple[str, Any]]) -> bytes:
    """A msgpack map with these key/value pairs in this order, repeated keys included (which
    ``msgpack.packb`` of a dict cannot write)."""
    assert len(pairs) <= 15
    return bytes([0x80 | len(pairs)]) + b"".join(pack(k) + pack(v) for k, v in pairs)


def map_paths(node: Any, prefix: str = "") -> list[str]:
    """The path of every map in ``node`` ("" for the top)."""
    if not isinstance(node, dict):
        return []
    return [prefix] + [p for k, v in node.items() for p in map_paths(v, f"{prefix}.{k}" if prefix else k)]


def field_paths(node: dict, prefix: str = "") -> list[str]:
    """The path of every field of every map in ``node``."""
    paths = []
    for key, value in node.items():
        path = f"{prefix}.{key}" if prefix else key
        paths += [path, *(field_paths(value, path) if isinstance(value, dict) else [])]
    return paths


def test_the_base_message_is_valid():
    assert decode(VALID) == decode(encode(make_batch()))
    assert len(raw_tokens()) == NUM_IDS + 2 * sum(map(sum, COMPLETION_LENGTHS))  # 1-byte ids, 2-byte log-probs


# --- framing ----------------------------------------------------------------------------------------


def test_every_truncation_is_refused():
    for end in range(len(VALID)):
        assert decode_error(VALID[:end]).field == "payload", end


@pytest.mark.parametrize("tail", [b"\x00", b"\xc0", b"garbage", VALID], ids=["zero", "nil", "text", "twice"])
def test_trailing_bytes_are_refused(tail):
    assert decode_error(VALID + tail).field == "payload"


@pytest.mark.parametrize(
    "data", [b"", b"\xc1", b"\xff" * 16, b"\xdc\xff\xff", b"\x81\xa1", b"\xd9\x05\xff\xfe\xfd\xfc\xfb"],
    ids=["empty", "reserved-byte", "noise", "short-array", "short-map", "bad-utf8"],
)  # fmt: skip
def test_not_msgpack(data):
    assert decode_error(data).field == "payload"


@pytest.mark.parametrize("value", [[1, 2], 1, "batch", None, b"x", 1.5, True], ids=repr)
def test_top_level_must_be_a_map(value):
    assert decode_error(pack(value)).field == "envelope"


@pytest.mark.parametrize("value", ["text", None, 12, [VALID], memoryview(VALID)[::2]],
                         ids=["str", "none", "int", "list", "strided-view"])
def test_input_must_be_bytes_like(value):
    assert decode_error(value).field == "payload"


def test_a_view_of_another_format_is_read_as_its_bytes():
    data = next(m for m in (mutated("body.run_id", "r" * n) for n in range(1, 5)) if len(m) % 4 == 0)
    assert decode(memoryview(data).cast("I")) == decode(data)


def test_payload_over_the_limit_is_refused_before_unpacking(monkeypatch):
    monkeypatch.setattr(decode_module, "BATCH_BOUNDS", replace(decode_module.BATCH_BOUNDS, max_bytes=len(VALID) - 1))

    def fail(*args, **kwargs):
        raise AssertionError("unpacked a payload over the limit")

    monkeypatch.setattr(msgpack, "unpackb", fail)
    assert decode_error(VALID).field == "payload"
    assert "limit" in decode_error(bytearray(VALID)).reason
    assert decode_error(memoryview(VALID)).field == "payload"


def test_payload_at_the_limit_is_accepted(monkeypatch):
    monkeypatch.setattr(decode_module, "BATCH_BOUNDS", replace(decode_module.BATCH_BOUNDS, max_bytes=len(VALID)))
    decode(VALID)
    decode(memoryview(VALID))


def test_duplicate_key_in_the_envelope():
    body = unpack(VALID)["body"]
    data = pack_pairs([("v", 1), ("kind", "batch"), ("body", body), ("v", 1)])
    assert decode_error(data).field == "payload"


def test_duplicate_key_in_the_body():
    body = unpack(VALID)["body"]
    body_bytes = pack_pairs([*body.items(), ("seq", body["seq"])])
    data = b"\x83" + pack("v") + pack(1) + pack("kind") + pack("batch") + pack("body") + body_bytes
    assert decode_error(data).field == "payload"


@pytest.mark.parametrize(
    ("path", "ext"),
    [
        ("body.seq", msgpack.ExtType(5, b"\x01")),
        ("body.run_id", msgpack.Timestamp(1, 0)),
        ("body.tokens.data", msgpack.ExtType(1, b"x" * 20)),
        ("body.groups.group_id", [msgpack.ExtType(100, b"ab")]),
    ],
    ids=["ext-int", "timestamp", "ext-data", "ext-in-list"],
)
def test_ext_types_are_refused(path, ext):
    assert decode_error(mutated(path, ext)).field == "payload"


def test_empty_ext_is_refused_as_a_wrong_type():
    # A zero-length ext passes msgpack's ext limit, so the schema refuses it by type.
    assert decode_error(mutated("body.seq", msgpack.ExtType(5, b""))).field == "body.seq"
    assert decode_error(pack(msgpack.ExtType(5, b""))).field == "envelope"


@pytest.mark.parametrize("levels", [1, 2, 3, 10, 1000, 10_000])
def test_nesting_deeper_than_the_schema_is_refused_from_the_headers(levels):
    nested: Any = 0
    for _ in range(levels):
        nested = [nested]
    data = b"\x91" * levels + b"\x00"  # the same, without msgpack's own recursion limit on packing
    if levels < 500:
        assert pack(nested) == data
    marker = pack("<nesting goes here>")
    error = decode_error(mutated("body.run_id", "<nesting goes here>").replace(marker, data, 1))
    # body.run_id sits in 2 maps: up to MAX_DEPTH - 2 lists there reach the schema, which refuses the type
    assert error.field == ("body.run_id" if 2 + levels <= MAX_DEPTH else "payload")


def test_a_list_in_a_list_of_the_schema_is_too_deep():
    error = decode_error(mutated("body.groups.answer", ["0", ["1"]]))  # a list 5 containers deep
    assert error.field == "payload"
    assert "deeper than" in error.reason


def test_map_with_too_many_entries():
    assert decode_error(mutated("body.policy.extra", {str(i): i for i in range(MAX_MAP_ENTRIES + 1)})).field == (
        "payload"
    )


def test_too_many_groups():
    # The walk over the message's headers refuses this, before any object is built.
    message = unpack(VALID)
    message["body"]["groups"]["group_id"] = [f"g{i}" for i in range(MAX_GROUPS + 1)]
    assert decode_error(pack(message)).field == "payload"
    message["body"]["groups"]["group_id"] = [f"g{i}" for i in range(MAX_GROUPS)]  # at the limit: read on
    assert decode_error(pack(message)).field == "body.groups.dataset"


def test_too_many_tokens_is_refused_before_the_token_column():
    k = MAX_BATCH_TOKENS // MAX_PROMPT_TOKENS + 1  # groups of one full prompt and one 1-token completion
    message = unpack(VALID)
    message["body"]["groups"] = {
        "group_id": [f"g{i}" for i in range(k)],
        "dataset": ["d"] * k,
        "split": [""] * k,
        "index": [0] * k,
        "answer": [""] * k,
        "size": u32([1] * k),
        "prompt_length": u32([MAX_PROMPT_TOKENS] * k),
    }
    message["body"]["completions"] = {"length": u32([1] * k), "reward": f64([0.0] * k), "finish_reason": bytes(k)}
    error = decode_error(pack(message))
    assert error.field == "body.completions.length"
    assert "limit" in error.reason


# --- envelope ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 4, 255, -1, 2**64 - 1])
def test_unknown_version(version):
    assert decode_error(mutated("v", version)).field == "v"


def test_unknown_version_is_named_before_anything_else_is_read():
    # A later version may change everything else; this build must still say "unknown version".
    data = pack({"v": 4, "kind": "something-new", "body": [1, 2, 3], "signature": b"..."})
    error = decode_error(data)
    assert error.field == "v"
    assert "version" in error.reason


@pytest.mark.parametrize("kind", ["ack", "", "Batch", "batch\x00"])
def test_unknown_kind(kind):
    assert decode_error(mutated("kind", kind)).field == "kind"


# --- the schema: missing, unknown, duplicate and wrongly typed fields ----------------------------------


@pytest.mark.parametrize("path", field_paths(unpack(VALID)))
def test_missing_field(path):
    assert decode_error(without(path)).field == path


@pytest.mark.parametrize("path", map_paths(unpack(VALID)))
def test_unknown_field(path):
    error = decode_error(mutated(f"{path}.surprise" if path else "surprise", 1))
    assert error.field == (path or "envelope")
    assert "surprise" in error.reason


WRONG_TYPES = [
    # (path, value): str for int, bool for int, float for int, int for str, list for map, ...
    ("v", "1"),
    ("v", True),
    ("v", 1.0),
    ("kind", 1),
    ("body", []),
    ("body", "body"),
    ("body.run_id", 5),
    ("body.run_id", b"run-1"),
    ("body.run_id", None),
    ("body.peer_id", ["peer-a"]),
    ("body.seq", "7"),
    ("body.seq", True),
    ("body.seq", 7.0),
    ("body.seq", None),
    ("body.created_at", "1700000000"),
    ("body.created_at", True),
    ("body.created_at", None),
    ("body.policy", []),
    ("body.policy", "lora"),
    ("body.policy.model", 3),
    ("body.policy.revision", None),
    ("body.policy.adapter", 1),
    ("body.policy.policy_version", 3.0),
    ("body.policy.policy_version", False),
    ("body.tokenizer", None),
    ("body.tokenizer.fingerprint", b"sha256:abc"),
    ("body.tokenizer.vocab_size", "200"),
    ("body.tokenizer.vocab_size", 200.0),
    ("body.sampling", [0.9, 0.95, 50, 8]),
    ("body.sampling.temperature", "0.9"),
    ("body.sampling.temperature", True),
    ("body.sampling.top_p", None),
    ("body.sampling.top_k", 50.0),
    ("body.sampling.max_new_tokens", True),
    ("body.groups", ["g0", "g1"]),
    ("body.groups.group_id", "g0"),
    ("body.groups.group_id", {"0": "g0", "1": "g1"}),
    ("body.groups.dataset", b"arith"),
    ("body.groups.index", u32([0, 1])),
    ("body.groups.size", [2, 3]),
    ("body.groups.size", "\x02\x00\x00\x00\x03\x00\x00\x00"),
    ("body.groups.prompt_length", None),
    ("body.completions", []),
    ("body.completions.length", [3, 1, 4, 2, 5]),
    ("body.completions.reward", [0.0, 0.5, 1.0, 1.5, 2.0]),
    ("body.completions.finish_reason", "\x00\x01\x00\x01\x00"),
    ("body.tokens", b"tokens"),
    ("body.tokens.id_width", True),
    ("body.tokens.id_width", "1"),
    ("body.tokens.logprob_width", 1.0),
    ("body.tokens.data", "zstd"),
    ("body.tokens.data", [1, 2]),
]


@pytest.mark.parametrize(("path", "value"), WRONG_TYPES, ids=[f"{p}={v!r}"[:60] for p, v in WRONG_TYPES])
def test_wrong_type(path, value):
    assert decode_error(mutated(path, value)).field == path


ITEM_TYPES = [
    # (list path, a list with a wrong item at index 1): the field names the item
    ("body.groups.group_id", ["g0", 1]),
    ("body.groups.group_id", ["g0", None]),
    ("body.groups.dataset", ["arith", b"arith"]),
    ("body.groups.split", ["train", 0]),
    ("body.groups.index", [0, "1"]),
    ("body.groups.index", [0, True]),
    ("body.groups.index", [0, 1.0]),
    ("body.groups.index", [0, -1]),
    ("body.groups.index", [0, 2**64 - 1]),
]


@pytest.mark.parametrize(("path", "value"), ITEM_TYPES, ids=[f"{p}={v!r}" for p, v in ITEM_TYPES])
def test_wrong_item_type(path, value):
    assert decode_error(mutated(path, value)).field == f"{path}[1]"


# --- columns that disagree --------------------------------------------------------------------------


COLUMN_LENGTHS = [
    # (path, value, field)
    ("body.groups.dataset", ["arith"], "body.groups.dataset"),
    ("body.groups.split", ["train", "train", "train"], "body.groups.split"),
    ("body.groups.index", [0], "body.groups.index"),
    ("body.groups.answer", [], "body.groups.answer"),
    ("body.groups.group_id", ["g0", "g1", "g2"], "body.groups.dataset"),  # the others are now short
    ("body.groups.group_id", [], "body.groups.group_id"),
    ("body.groups.size", u32([2]), "body.groups.size"),
    ("body.groups.size", u32([2, 3, 1]), "body.groups.size"),
    ("body.groups.size", u32([2, 3])[:-1], "body.groups.size"),
    ("body.groups.prompt_length", u32([4]), "body.groups.prompt_length"),
    ("body.groups.size", u32([2, 4]), "body.completions.length"),  # six completions, five listed
    ("body.groups.size", u32([1, 3]), "body.completions.length"),  # four completions, five listed
    ("body.completions.length", u32([3, 1, 4, 2]), "body.completions.length"),
    ("body.completions.length", u32([3, 1, 4, 2, 5, 1]), "body.completions.length"),
    ("body.completions.reward", f64([0.0] * 4), "body.completions.reward"),
    ("body.completions.reward", f64([0.0] * 6), "body.completions.reward"),
    ("body.completions.reward", f64([0.0] * 5)[:-1], "body.completions.reward"),
    ("body.completions.finish_reason", bytes(4), "body.completions.finish_reason"),
    ("body.completions.finish_reason", bytes(6), "body.completions.finish_reason"),
    # The columns agree with each other but not with the token column: its frame has the wrong size.
    ("body.completions.length", u32([3, 1, 4, 2, 4]), "body.tokens.data"),
    ("body.groups.prompt_length", u32([4, 3]), "body.tokens.data"),
]


@pytest.mark.parametrize(
    ("path", "value", "field"), COLUMN_LENGTHS, ids=[f"{p}-{i}" for i, (p, *_) in enumerate(COLUMN_LENGTHS)]
)
def test_column_lengths_disagree(path, value, field):
    assert decode_error(mutated(path, value)).field == field


@pytest.mark.parametrize("reward", [math.nan, math.inf, -math.inf])
def test_non_finite_reward(reward):
    assert decode_error(mutated("body.completions.reward", f64([0.0, 0.5, reward, 1.5, 2.0]))).field == (
        "body.completions.reward"
    )


# --- values out of range ----------------------------------------------------------------------------

OUT_OF_RANGE = [
    ("body.groups.size", u32([0, 5]), "body.groups.size"),
    ("body.groups.size", u32([2, MAX_GROUP_SIZE + 1]), "body.groups.size"),
    ("body.groups.size", u32([2, 2**32 - 1]), "body.groups.size"),
    ("body.groups.prompt_length", u32([0, 6]), "body.groups.prompt_length"),
    ("body.groups.prompt_length", u32([4, MAX_PROMPT_TOKENS + 1]), "body.groups.prompt_length"),
    ("body.completions.length", u32([3, 0, 4, 2, 6]), "body.completions.length"),
    ("body.completions.length", u32([3, 1, 4, 2, MAX_NEW_TOKENS + 1]), "body.completions.length"),
    ("body.sampling.max_new_tokens", max(map(max, COMPLETION_LENGTHS)) - 1, "body.completions.length"),
    ("body.completions.finish_reason", bytes([0, 1, 2, 0, 0]), "body.completions.finish_reason"),
    ("body.completions.finish_reason", bytes([0, 1, 0, 0, 255]), "body.completions.finish_reason"),
    ("body.tokenizer.vocab_size", 0, "body.tokenizer.vocab_size"),
    ("body.tokenizer.vocab_size", -200, "body.tokenizer.vocab_size"),
    ("body.tokenizer.vocab_size", MAX_VOCAB_SIZE + 1, "body.tokenizer.vocab_size"),
    ("body.tokenizer.vocab_size", 300, "body.tokens.id_width"),  # needs 2-byte ids; the column has 1
    ("body.tokens.id_width", 2, "body.tokens.id_width"),
    ("body.tokens.id_width", 0, "body.tokens.id_width"),
    ("body.tokens.id_width", 4, "body.tokens.id_width"),
    ("body.tokens.logprob_width", 0, "body.tokens.logprob_width"),
    ("body.tokens.logprob_width", 4, "body.tokens.logprob_width"),
    ("body.tokens.logprob_width", 1, "body.tokens.data"),  # a legal width, but not this column's (2)
    ("body.tokens.logprob_width", 3, "body.tokens.data"),
    ("body.seq", -1, "body.seq"),
    ("body.seq", 2**64 - 1, "body.seq"),
    ("body.created_at", -1.0, "body.created_at"),
    ("body.created_at", 1e12, "body.created_at"),
    ("body.created_at", math.nan, "body.created_at"),
    ("body.created_at", math.inf, "body.created_at"),
    ("body.policy.adapter", "qlora", "body.policy.adapter"),
    ("body.policy.adapter", "", "body.policy.adapter"),
    ("body.policy.policy_version", -3, "body.policy.policy_version"),
    ("body.sampling.temperature", 0.0, "body.sampling.temperature"),
    # A claim of T = 1e-6 would make the receiver divide its logits by it (they are computed at the sampler's T).
    ("body.sampling.temperature", 1e-6, "body.sampling.temperature"),
    ("body.sampling.temperature", MIN_TEMPERATURE * 0.999, "body.sampling.temperature"),
    ("body.sampling.temperature", MAX_TEMPERATURE * 1.001, "body.sampling.temperature"),
    # A round whose next round the publisher could not encode (a node jumping to it stopped for good).
    ("body.seq", MAX_ROUND + 1, "body.seq"),
    ("body.seq", 2**63 - 1, "body.seq"),
    ("body.sampling.temperature", math.nan, "body.sampling.temperature"),
    ("body.sampling.top_p", 1.5, "body.sampling.top_p"),
    ("body.sampling.top_p", 0, "body.sampling.top_p"),
    ("body.sampling.top_k", -1, "body.sampling.top_k"),
    ("body.sampling.max_new_tokens", 0, "body.sampling.max_new_tokens"),
    ("body.run_id", "", "body.run_id"),
    ("body.run_id", "r" * (MAX_NAME_CHARS + 1), "body.run_id"),
    ("body.peer_id", "é" * (MAX_NAME_CHARS + 1), "body.peer_id"),
    ("body.policy.model", "", "body.policy.model"),
    ("body.tokenizer.fingerprint", "", "body.tokenizer.fingerprint"),
    ("body.groups.group_id", ["g0", ""], "body.groups.group_id[1]"),
    ("body.groups.group_id", ["g0", "g" * (MAX_NAME_CHARS + 1)], "body.groups.group_id[1]"),
    ("body.groups.dataset", ["", "arith"], "body.groups.dataset[0]"),
    ("body.groups.answer", ["0", "1" * (MAX_ANSWER_CHARS + 1)], "body.groups.answer[1]"),
    ("body.groups.group_id", ["g0", "g0"], "body.groups.group_id"),  # duplicate group ids
]


@pytest.mark.parametrize(("path", "value", "field"), OUT_OF_RANGE, ids=[f"{p}={v!r}"[:60] for p, v, _ in OUT_OF_RANGE])
def test_out_of_range(path, value, field):
    assert decode_error(mutated(path, value)).field == field


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("body.run_id", "r" * MAX_NAME_CHARS),
        ("body.groups.split", ["", ""]),
        ("body.policy.revision", ""),
        ("body.sampling.top_p", 1),
    ],
)
def test_edge_values_are_accepted(path, value):
    decode(mutated(path, value))


# --- token ids and the token column -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("position", "group"),
    [(0, 0), (PROMPT_LENGTHS[0], 0), (GROUP_1_START, 1), (GROUP_1_START + PROMPT_LENGTHS[1], 1), (NUM_IDS - 1, 1)],
    ids=["prompt-0", "completion-0", "prompt-1", "completion-1", "last"],
)
def test_token_id_not_below_vocab_size(position, group):
    raw = raw_tokens()
    raw[position] = 200  # == vocab_size
    error = decode_error(mutated("body.tokens.data", zstd(raw)))
    assert error.field == "body.tokens.data"
    assert f"group {group}" in error.reason


def test_vocab_size_is_an_exclusive_bound():
    assert decode_error(mutated("body.tokenizer.vocab_size", 199)).field == "body.tokens.data"  # id 199 is used
    decode(mutated("body.tokenizer.vocab_size", 256))


def test_wide_ids_above_vocab_size():
    data = encode(make_batch(vocab_size=151_936, high_id=151_935))
    assert decode_error(mutated("body.tokenizer.vocab_size", 151_935, data)).field == "body.tokens.data"


ZSTD_FRAMES = {
    "wrong-content-size": zstd(raw_tokens() + b"\x00"),
    "short-content-size": zstd(raw_tokens()[:-1]),
    "no-content-size": zstd(raw_tokens(), write_content_size=False),
    "checksum": field_of("body.tokens.data")[:-1] + bytes([field_of("body.tokens.data")[-1] ^ 1]),
    "truncated": field_of("body.tokens.data")[:-3],
    "header-only": field_of("body.tokens.data")[:6],
    "extra-byte": field_of("body.tokens.data") + b"\x00",
    "two-frames": field_of("body.tokens.data") * 2,
    "skippable": b"\x50\x2a\x4d\x18\x04\x00\x00\x00abcd",
    "not-zstd": bytes(raw_tokens()),
    "empty": b"",
}


@pytest.mark.parametrize("frame", ZSTD_FRAMES.values(), ids=ZSTD_FRAMES.keys())
def test_bad_zstd_frame(frame):
    assert decode_error(mutated("body.tokens.data", frame)).field == "body.tokens.data"


def test_corrupt_zstd_body():
    data = bytearray(field_of("body.tokens.data"))
    for i in range(6, len(data)):  # past the frame header: each flipped byte corrupts the body or checksum
        corrupt = bytearray(data)
        corrupt[i] ^= 0x5A
        assert decode_error(mutated("body.tokens.data", bytes(corrupt))).field == "body.tokens.data", i


# --- encode refuses what the wire cannot carry --------------------------------------------------------


def with_completion(batch: RolloutBatch, g: int, c: int, **changes: Any) -> RolloutBatch:
    group = batch.groups[g]
    completions = list(group.completions)
    completions[c] = replace(completions[c], **changes)
    groups = list(batch.groups)
    groups[g] = replace(group, completions=tuple(completions))
    return replace(batch, groups=tuple(groups))


def encode_error(batch: RolloutBatch) -> EncodeError:
    with pytest.raises(EncodeError) as info:
        encode(batch)
    return info.value


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 0.5, 1e-12, MIN_LOGPROB - 1.0])
def test_encode_refuses_unrepresentable_logprobs(bad):
    batch = make_batch()
    logprobs = batch.groups[1].completions[2].sampler_logprobs.copy()
    logprobs[3] = bad
    error = encode_error(with_completion(batch, 1, 2, sampler_logprobs=logprobs))
    assert error.field == "groups[1].completions[2].sampler_logprobs"


@pytest.mark.parametrize("bad_id", [200, 10**9, -1])
def test_encode_refuses_ids_outside_the_vocabulary(bad_id):
    batch = make_batch()
    ids = batch.groups[0].completions[1].token_ids.copy()
    ids[0] = bad_id
    assert encode_error(with_completion(batch, 0, 1, token_ids=ids)).field == "groups[0].completions[1].token_ids"
    prompt = batch.groups[1].prompt_ids.copy()
    prompt[-1] = bad_id
    batch = replace(batch, groups=(batch.groups[0], replace(batch.groups[1], prompt_ids=prompt)))
    assert encode_error(batch).field == "groups[1].prompt_ids"


def test_encode_refuses_non_integer_ids():
    batch = make_batch()
    ids = batch.groups[0].completions[0].token_ids.astype(np.float64)
    assert encode_error(with_completion(batch, 0, 0, token_ids=ids)).field == "groups[0].completions[0].token_ids"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"reward": "x"}, "groups[0].completions[1].reward"),
        ({"reward": "1.5"}, "groups[0].completions[1].reward"),  # numpy would quietly parse it
        ({"reward": None}, "groups[0].completions[1].reward"),
        ({"sampler_logprobs": np.array(["-1", "0"])}, "groups[0].completions[1].sampler_logprobs"),
        ({"sampler_logprobs": np.array([None, None])}, "groups[0].completions[1].sampler_logprobs"),
    ],
    ids=["reward-str", "reward-numeric-str", "reward-none", "logprobs-str", "logprobs-object"],
)
def test_encode_refuses_values_of_the_wrong_type(changes, field):
    batch = make_batch()
    if "sampler_logprobs" in changes:  # keep the lengths equal, so the type is what is wrong
        batch = with_completion(batch, 0, 1, token_ids=np.array([1, 2]))
    assert encode_error(with_completion(batch, 0, 1, **changes)).field == field


@pytest.mark.parametrize("vocab_size", ["200", None, 200.0])
def test_encode_refuses_a_vocab_size_that_is_not_an_integer(vocab_size):
    batch = make_batch()
    assert encode_error(replace(batch, tokenizer=replace(batch.tokenizer, vocab_size=vocab_size))).field == (
        "tokenizer.vocab_size"
    )


def test_encode_accepts_plain_lists():
    batch = make_batch()
    lists = with_completion(batch, 1, 2, token_ids=[5, 6, 7], sampler_logprobs=[-1.0, 0.0, -2.5])
    lists = replace(lists, groups=(replace(lists.groups[0], prompt_ids=[1, 2, 3, 4]), lists.groups[1]))
    decoded = decode(encode(lists))
    assert decoded.groups[1].completions[2].token_ids.tolist() == [5, 6, 7]
    assert decoded.groups[1].completions[2].sampler_logprobs.tolist() == [-1.0, 0.0, -2.5]
    assert decoded.groups[0].prompt_ids.tolist() == [1, 2, 3, 4]


def test_encode_refuses_mismatched_lengths():
    batch = make_batch()
    logprobs = batch.groups[0].completions[0].sampler_logprobs[:-1]
    error = encode_error(with_completion(batch, 0, 0, sampler_logprobs=logprobs))
    assert error.field == "groups[0].completions[0].sampler_logprobs"


def test_encode_refuses_unknown_finish_reason():
    error = encode_error(with_completion(make_batch(), 1, 0, finish_reason="eos"))
    assert error.field == "groups[1].completions[0].finish_reason"


def _empty_group(batch: RolloutBatch) -> RolloutBatch:
    return replace(batch, groups=(batch.groups[0], replace(batch.groups[1], completions=())))


ENCODE_REFUSED = [
    # (name, change to the valid batch, field): batches decode would refuse, refused with its field name
    ("no-groups", lambda b: replace(b, groups=()), "body.groups.group_id"),
    ("empty-group", _empty_group, "body.groups.size"),
    ("long-group-id", lambda b: replace(b, groups=(replace(b.groups[0], group_id="g" * 257), b.groups[1])),
     "body.groups.group_id[0]"),
    ("same-group-ids", lambda b: replace(b, groups=(b.groups[0], replace(b.groups[1], group_id="g0"))),
     "body.groups.group_id"),
    ("empty-prompt", lambda b: replace(b, groups=(replace(b.groups[0], prompt_ids=np.zeros(0, np.int64)),
                                                  b.groups[1])), "body.groups.prompt_length"),
    ("empty-completion", lambda b: with_completion(b, 0, 0, token_ids=np.zeros(0, np.int64),
                                                   sampler_logprobs=np.zeros(0)), "body.completions.length"),
    ("over-max-new-tokens", lambda b: replace(b, sampling=replace(b.sampling, max_new_tokens=4)),
     "body.completions.length"),
    ("nan-reward", lambda b: with_completion(b, 1, 1, reward=math.nan), "body.completions.reward"),
    ("negative-seq", lambda b: replace(b, round=-1), "body.seq"),
    ("empty-run-id", lambda b: replace(b, run_id=""), "body.run_id"),
    ("run-id-not-str", lambda b: replace(b, run_id=12), "body.run_id"),
    ("unknown-adapter", lambda b: replace(b, policy=replace(b.policy, adapter="qlora")), "body.policy.adapter"),
    ("huge-vocab", lambda b: replace(b, tokenizer=replace(b.tokenizer, vocab_size=MAX_VOCAB_SIZE + 1)),
     "body.tokenizer.vocab_size"),
    ("zero-temperature", lambda b: replace(b, sampling=replace(b.sampling, temperature=0.0)),
     "body.sampling.temperature"),
    ("unpackable-seq", lambda b: replace(b, round=object()), "batch"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "field"), [c[1:] for c in ENCODE_REFUSED], ids=[c[0] for c in ENCODE_REFUSED])
def test_encode_refuses_what_decode_would_refuse(change, field):
    assert encode_error(change(make_batch())).field == field


# --- mutation fuzzing -------------------------------------------------------------------------------


def test_mutation_fuzz():
    """The shared mutator (``fuzz_inputs.mutate``; ``tests/test_fuzz.py`` and ``benchmarks/fuzz.py`` run it
    on more shapes, with the limit oracle and the memory bound) on this file's batches."""
    messages = [
        VALID,
        encode(make_batch(vocab_size=151_936, high_id=151_935)),
        encode(with_completion(make_batch(vocab_size=60_000, high_id=59_999), 1, 2,
                               sampler_logprobs=np.array([-30_000.0, -1.0, 0.0, -2.0, -1e-9]))),
    ]  # fmt: skip
    rng = random.Random(20240601)
    outcomes = {"decoded": 0, "refused": 0}
    for i in range(3000):
        kind, data = mutate(rng, messages)
        try:
            batch = decode(data)
        except DecodeError as error:
            assert isinstance(error.field, str) and error.field, (i, kind, data)
            outcomes["refused"] += 1
            continue
        except Exception as error:
            raise AssertionError(f"mutation {i} ({kind}) raised {type(error).__name__}: {error}; input {data!r}") \
                from error
        assert isinstance(batch, RolloutBatch)
        assert decode(encode(batch)) == batch  # whatever decodes is a batch encode can carry
        outcomes["decoded"] += 1
    assert outcomes["refused"] > 1000 and outcomes["decoded"] > 50, outcomes
