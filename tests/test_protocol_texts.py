"""Protocol v3's text column: texts survive a round trip exactly, a batch carries every completion's text or
none, and every malformed text column is refused with a ``DecodeError`` naming ``body.texts...``, before
anything past the declared, bounded sizes is inflated.

Run: python -m pytest tests/test_protocol_texts.py -q

Bad messages are made from a valid one as in ``test_protocol_malformed.py``: unpack it, change the text column,
pack it again. ``with_raw_texts`` writes the column from each completion's raw bytes, so a case can put any
bytes (invalid UTF-8 among them) in one completion's place.
"""

import dataclasses
import importlib
import time
import tracemalloc
from typing import Any

import msgpack
import numpy as np
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
    read,
)
from ftis.protocol.limits import LOGPROB_STEP, MAX_TEXT_BYTES_PER_TOKEN, MAX_TEXT_SLACK_BYTES
from ftis.protocol.summary import summarize

columns_module = importlib.import_module("ftis.protocol.columns")

# Two groups; each completion's token count and text (a character of 1 to 4 UTF-8 bytes in each group).
SHAPE = [[(3, "café"), (1, "")], [(4, "漢字 x"), (2, "🙂"), (5, "ok\n")]]


def make_batch(shape: list[list[tuple[int, str | None]]] = SHAPE, max_new_tokens: int = 8) -> RolloutBatch:
    groups = []
    for g, completions in enumerate(shape):
        made = tuple(
            Completion(np.arange(n) % 200, -np.arange(n) * LOGPROB_STEP, float(c), "stop", text)
            for c, (n, text) in enumerate(completions)
        )
        groups.append(Group(f"g{g}", TaskRef("arith", "train", g, str(g)), np.array([1, 2, g]), made))
    return RolloutBatch("run", "peer", 1, 1_700_000_000.0, PolicyInfo("m", "", "full", 0), TokenizerInfo("fp", 200),
                        SamplingSettings(1.0, 1.0, 0, max_new_tokens), tuple(groups))


VALID = encode(make_batch())
NUM_TOKENS = [n for group in SHAPE for n, _ in group]  # (N,) per completion, in wire order


def unpack(data: bytes) -> dict:
    return msgpack.unpackb(data, raw=False)


def pack(message: Any) -> bytes:
    return msgpack.packb(message, use_bin_type=True)


def with_texts(texts: Any, base: bytes = VALID, version: int | None = None) -> bytes:
    """``base`` with its body's ``texts`` set to ``texts`` (and its version to ``version``)."""
    message = unpack(base)
    message["body"]["texts"] = texts
    if version is not None:
        message["v"] = version
    return pack(message)


def zstd(raw: bytes, **options: Any) -> bytes:
    return zstandard.ZstdCompressor(write_checksum=True, **options).compress(raw)


def with_raw_texts(raw: list[bytes]) -> bytes:
    """The valid message with a text column holding these bytes, one entry per completion."""
    lengths = np.array([len(r) for r in raw], "<u4").tobytes()
    return with_texts({"length": lengths, "data": zstd(b"".join(raw))})


def decode_error(data: bytes) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        decode(data)
    return info.value


def encode_error(batch: RolloutBatch) -> EncodeError:
    with pytest.raises(EncodeError) as info:
        encode(batch)
    return info.value


def texts_of(batch: RolloutBatch) -> list[str | None]:
    return [c.text for group in batch.groups for c in group.completions]


# --- round trips ------------------------------------------------------------------------------------


def test_texts_survive_a_round_trip():
    decoded = decode(VALID)
    assert texts_of(decoded) == [text for group in SHAPE for _, text in group]
    assert decoded == make_batch()
    assert decoded.groups[1].columns.texts == ("漢字 x", "🙂", "ok\n")
    assert unpack(VALID)["v"] == 3


def test_a_batch_without_texts_round_trips_with_none():
    batch = make_batch([[(n, None) for n, _ in group] for group in SHAPE])
    data = encode(batch)
    assert "texts" not in unpack(data)["body"]
    decoded = decode(data)
    assert texts_of(decoded) == [None] * len(NUM_TOKENS)
    assert all(group.columns.texts is None for group in decoded.groups)
    assert decoded == batch


@pytest.mark.parametrize("version", [1, 2])
def test_v1_and_v2_batches_still_decode_without_texts(version):
    message = unpack(encode(make_batch([[(n, None) for n, _ in group] for group in SHAPE])))
    decoded = decode(pack({**message, "v": version}))
    assert texts_of(decoded) == [None] * len(NUM_TOKENS)


# Any text but lone surrogates (which UTF-8 cannot carry): every plane, controls, NUL, combining marks.
any_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


@st.composite
def batches_with_texts(draw: st.DrawFn) -> RolloutBatch:
    shape = [draw(st.lists(st.tuples(st.integers(1, 8), any_text), min_size=1, max_size=4))
             for _ in range(draw(st.integers(1, 3)))]
    return make_batch(shape)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches_with_texts())
def test_any_texts_round_trip_exactly(batch):
    data = encode(batch)
    decoded = decode(data)
    assert texts_of(decoded) == texts_of(batch)
    assert decoded == batch
    assert encode(decoded) == data


def test_a_text_at_its_bound_is_carried():
    bound = MAX_TEXT_BYTES_PER_TOKEN * 1 + MAX_TEXT_SLACK_BYTES
    batch = make_batch([[(1, "é" * (bound // 2))]])  # 2 bytes a character: exactly the bound
    assert texts_of(decode(encode(batch))) == texts_of(batch)


# --- encode refuses what the wire cannot carry ---------------------------------------------------------


def test_a_batch_whose_groups_differ_in_texts_is_refused():
    mixed = make_batch([[(2, "a"), (1, "b")], [(3, None)], [(1, "c")]])
    error = encode_error(mixed)
    assert error.field == "groups[1].completions"
    assert "every completion's text or none" in error.reason
    error = encode_error(make_batch([[(2, None)], [(3, "x")]]))
    assert error.field == "groups[1].completions"


def test_a_group_whose_completions_differ_in_texts_is_refused():
    assert encode_error(make_batch([[(2, "a")], [(1, "b"), (1, None)]])).field == "groups[1].completions[1].text"


@pytest.mark.parametrize("text", [b"bytes", 3, ["a"]], ids=["bytes", "int", "list"])
def test_a_text_that_is_not_a_string_is_refused(text):
    assert encode_error(make_batch([[(2, "a"), (1, text)]])).field == "groups[0].completions[1].text"


def test_a_text_that_is_not_a_string_in_hand_built_columns_is_refused():
    columns = make_batch().groups[1].columns
    group = Group.from_columns("g1", TaskRef("arith", "train", 1, "1"), np.array([1]),
                               dataclasses.replace(columns, texts=("a", b"b", "c")))
    batch = dataclasses.replace(make_batch(), groups=(make_batch().groups[0], group))
    assert encode_error(batch).field == "groups[1].completions[1].text"


@pytest.mark.parametrize("text", ["\ud800", "ok \udfff", "\udc80\ud800"], ids=["high", "low", "pair-reversed"])
def test_a_lone_surrogate_is_refused(text):
    error = encode_error(make_batch([[(2, "a")], [(1, "b"), (1, text)]]))
    assert error.field == "groups[1].completions[1].text"
    assert "UTF-8" in error.reason


def test_a_text_over_its_bound_is_refused():
    bound = MAX_TEXT_BYTES_PER_TOKEN * 2 + MAX_TEXT_SLACK_BYTES
    error = encode_error(make_batch([[(1, "a")], [(2, "x" * (bound + 1))]]))
    assert error.field == "groups[1].completions[0].text"


# --- decode refuses a malformed text column -------------------------------------------------------------

INVALID_UTF8 = {
    "overlong-slash": b"\xc0\xaf",
    "overlong-3-byte": b"\xe0\x80\xaf",
    "overlong-nul": b"\xc0\x80",
    "surrogate": b"\xed\xa0\x80",
    "surrogate-pair": b"\xed\xa0\xbd\xed\xb8\x80",  # CESU-8's emoji: two surrogates, not UTF-8
    "truncated-3-byte": "漢".encode()[:2],
    "truncated-4-byte": "🙂".encode()[:3],
    "lone-continuation": b"ok\x80",
    "ff-byte": b"\xff",
    "above-u10ffff": b"\xf4\x90\x80\x80",
}


@pytest.mark.parametrize("bad", INVALID_UTF8.values(), ids=INVALID_UTF8.keys())
def test_invalid_utf8_is_refused(bad):
    raw = [text.encode() for group in SHAPE for _, text in group]
    raw[3] = bad
    error = decode_error(with_raw_texts(raw))
    assert error.field == "body.texts.data"
    assert "completion 3" in error.reason and "UTF-8" in error.reason


def test_a_character_cut_between_two_completions_is_refused():
    raw = [text.encode() for group in SHAPE for _, text in group]
    raw[2], raw[3] = raw[2] + "漢".encode()[:1], "漢".encode()[1:] + raw[3]  # the whole is valid UTF-8, each part not
    error = decode_error(with_raw_texts(raw))
    assert error.field == "body.texts.data"
    assert "completion 2" in error.reason


def test_a_length_over_the_bound_is_refused():
    raw = [text.encode() for group in SHAPE for _, text in group]
    raw[1] = b"x" * (MAX_TEXT_BYTES_PER_TOKEN * NUM_TOKENS[1] + MAX_TEXT_SLACK_BYTES + 1)
    error = decode_error(with_raw_texts(raw))
    assert error.field == "body.texts.length"
    assert "completion 1" in error.reason
    raw[1] = raw[1][:-1]  # at the bound: carried
    assert texts_of(decode(with_raw_texts(raw)))[1] == raw[1].decode()


def test_lengths_that_do_not_sum_to_the_frame_are_refused():
    raw = b"".join(text.encode() for group in SHAPE for _, text in group)
    lengths = np.array([len(t.encode()) for group in SHAPE for _, t in group], "<u4")
    for frame in (zstd(raw + b"!"), zstd(raw[:-1])):
        error = decode_error(with_texts({"length": lengths.tobytes(), "data": frame}))
        assert error.field == "body.texts.data" and "declares" in error.reason
    longer = lengths.copy()
    longer[0] += 1
    assert decode_error(with_texts({"length": longer.tobytes(), "data": zstd(raw)})).field == "body.texts.data"


def frame_declaring(content_size: int) -> bytes:
    """A zstd frame header that declares ``content_size`` bytes (8-byte field, single segment), then one
    empty raw block: a few bytes that claim as much as the header says."""
    return b"\x28\xb5\x2f\xfd" + bytes([0xE0]) + content_size.to_bytes(8, "little") + b"\x01\x00\x00"


@pytest.mark.parametrize("claim", [1 << 40, (1 << 64) - 2, 10**9])
def test_a_frame_declaring_a_huge_size_is_refused_before_inflating(monkeypatch, claim):
    assert zstandard.get_frame_parameters(frame_declaring(claim)).content_size == claim

    def inflate_nothing():
        raise AssertionError("inflated a frame whose declared size the lengths do not allow")

    monkeypatch.setattr(columns_module, "_decompressor", inflate_nothing)
    data = with_texts({"length": np.zeros(len(NUM_TOKENS), "<u4").tobytes(), "data": frame_declaring(claim)})
    tracemalloc.start()
    started = time.perf_counter()
    try:
        error = decode_error(data)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert time.perf_counter() - started < 1.0
    assert error.field == "body.texts.data" and "declares" in error.reason
    assert peak < 256 * 1024


def test_lengths_at_their_bounds_over_an_empty_frame_allocate_only_what_the_bounds_allow():
    bounds = [MAX_TEXT_BYTES_PER_TOKEN * n + MAX_TEXT_SLACK_BYTES for n in NUM_TOKENS]
    data = with_texts({"length": np.array(bounds, "<u4").tobytes(), "data": frame_declaring(sum(bounds))})
    tracemalloc.start()
    try:
        error = decode_error(data)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert error.field == "body.texts.data"
    assert peak < 256 * 1024 + 4 * sum(bounds)


@pytest.mark.parametrize("count", [len(NUM_TOKENS) - 1, len(NUM_TOKENS) + 1, 0])
def test_a_length_column_of_the_wrong_count_is_refused(count):
    texts = unpack(VALID)["body"]["texts"]
    error = decode_error(with_texts({**texts, "length": np.ones(count, "<u4").tobytes()}))
    assert error.field == "body.texts.length"


def test_a_length_column_of_a_ragged_byte_count_is_refused():
    texts = unpack(VALID)["body"]["texts"]
    assert decode_error(with_texts({**texts, "length": texts["length"] + b"\x00"})).field == "body.texts.length"
    assert decode_error(with_texts({**texts, "length": texts["length"][:-1]})).field == "body.texts.length"


@pytest.mark.parametrize("version", [1, 2])
def test_texts_in_a_v1_or_v2_batch_are_refused(version):
    error = decode_error(with_texts(unpack(VALID)["body"]["texts"], version=version))
    assert error.field == "body.texts"
    assert "v3" in error.reason


WRONG = {
    "texts-list": ([b"\x04\x00\x00\x00", b"..."], "body.texts"),
    "texts-bytes": (b"cafe", "body.texts"),
    "texts-str": ("café", "body.texts"),
    "texts-nil": (None, "body.texts"),
    "texts-empty-map": ({}, "body.texts.length"),
    "length-list": ({"length": [4, 0, 7, 4, 3], "data": b""}, "body.texts.length"),
    "length-str": ({"length": "\x04\x00\x00\x00", "data": b""}, "body.texts.length"),
    "data-str": ("data-str", "body.texts.data"),
    "data-list": ("data-list", "body.texts.data"),
    "data-missing": ("data-missing", "body.texts.data"),
    "length-missing": ("length-missing", "body.texts.length"),
}


def _wrong(case: Any) -> Any:
    texts = unpack(VALID)["body"]["texts"]
    if case == "data-str":
        return {**texts, "data": "zstd"}
    if case == "data-list":
        return {**texts, "data": [1, 2]}
    if case == "data-missing":
        return {"length": texts["length"]}
    if case == "length-missing":
        return {"data": texts["data"]}
    return case


@pytest.mark.parametrize(("value", "field"), WRONG.values(), ids=WRONG.keys())
def test_a_text_column_of_the_wrong_shape_is_refused(value, field):
    assert decode_error(with_texts(_wrong(value))).field == field


def test_an_extra_key_in_texts_is_refused():
    error = decode_error(with_texts({**unpack(VALID)["body"]["texts"], "surprise": 1}))
    assert error.field == "body.texts"
    assert "surprise" in error.reason


FRAME = unpack(VALID)["body"]["texts"]["data"]
RAW = zstandard.ZstdDecompressor().decompress(FRAME)
BAD_FRAMES = {
    "checksum": FRAME[:-1] + bytes([FRAME[-1] ^ 1]),
    "truncated": FRAME[:-3],
    "header-only": FRAME[:6],
    "extra-byte": FRAME + b"\x00",
    "two-frames": FRAME * 2,
    "no-content-size": zstd(RAW, write_content_size=False),
    "not-zstd": RAW,
    "empty": b"",
}


@pytest.mark.parametrize("frame", BAD_FRAMES.values(), ids=BAD_FRAMES.keys())
def test_a_bad_frame_is_refused(frame):
    texts = unpack(VALID)["body"]["texts"]
    assert decode_error(with_texts({**texts, "data": frame})).field == "body.texts.data"


def test_every_corrupt_byte_of_the_frame_is_refused():
    texts = unpack(VALID)["body"]["texts"]
    for i in range(6, len(FRAME)):  # past the header: each flipped byte corrupts the body or the checksum
        corrupt = bytearray(FRAME)
        corrupt[i] ^= 0x5A
        assert decode_error(with_texts({**texts, "data": bytes(corrupt)})).field == "body.texts.data", i


def test_the_summary_says_whether_a_batch_carries_texts():
    rows = dict(summarize(decode(VALID), len(VALID)))
    assert rows["texts"] == f"{sum(len(t.encode()) for g in SHAPE for _, t in g)} bytes of UTF-8 in 5 completions"
    bare = encode(make_batch([[(n, None) for n, _ in group] for group in SHAPE]))
    assert dict(summarize(decode(bare), len(bare)))["texts"].startswith("none")


# --- what inflating costs, known before it is done ------------------------------------------------------------


def bulky_batch(text: str, groups: int = 8, size: int = 16, tokens: int = 64) -> RolloutBatch:
    """``groups`` × ``size`` completions of ``tokens`` tokens, each text ``text`` repeated to fill its bound."""
    repeat = max(1, (MAX_TEXT_BYTES_PER_TOKEN * tokens) // len(text.encode()) - 1)
    return make_batch([[(tokens, text * repeat)] * size] * groups, max_new_tokens=tokens)


@pytest.mark.parametrize("text", ["a", "é", "漢", "🙂", "a🙂"], ids=["ascii", "2-byte", "3-byte", "4-byte", "mixed"])
@pytest.mark.parametrize("texts", [True, False], ids=["texts", "no-texts"])
def test_cost_bounds_what_inflating_allocates_and_is_known_before(text, texts):
    """``read`` leaves the columns compressed; ``cost`` is at least what ``inflate`` then allocates at its peak,
    whatever the characters (one astral character makes a str 4 bytes a character), and not far above it."""
    data = encode(bulky_batch(text))
    compressed = read(data)
    tracemalloc.start()
    try:
        batch = compressed.inflate(texts)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (batch.groups[0].columns.texts is not None) == texts
    assert peak <= compressed.cost(texts) < 8 * peak
    if texts:
        assert compressed.text_bytes == sum(len(c.text.encode()) for g in batch.groups for c in g.completions)
        assert compressed.cost(True) - compressed.cost(False) >= compressed.text_bytes


def test_read_checks_the_text_lengths_before_anything_is_inflated(monkeypatch):
    """A text over its bound is refused by ``read`` itself: ``inflate`` is never reached."""
    bounds = [MAX_TEXT_BYTES_PER_TOKEN * n + MAX_TEXT_SLACK_BYTES for n in NUM_TOKENS]
    bounds[2] += 1
    data = with_texts({"length": np.array(bounds, "<u4").tobytes(), "data": frame_declaring(sum(bounds))})

    def inflate_nothing():
        raise AssertionError("a frame was inflated")

    monkeypatch.setattr(columns_module, "_decompressor", inflate_nothing)
    with pytest.raises(DecodeError) as caught:
        read(data)
    assert caught.value.field == "body.texts.length" and "completion 2" in caught.value.reason
