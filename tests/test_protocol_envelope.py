"""The walk over a message's msgpack headers (``protocol/envelope.py``, ``check_shape``) against the obvious slow
one: unpack with msgpack, then measure the objects. Both must agree on every input, valid or not; and the
schema's bounds (``MAX_DEPTH``, ``MAX_BATCH_VALUES``, ``MAX_ANNOUNCEMENT_VALUES``) pass every valid message.

Run: python -m pytest tests/test_protocol_envelope.py -q
"""

import random
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.fuzzing.inputs import announcement_seeds, batch_seeds
from ftis.protocol import (
    Completion,
    DecodeError,
    Group,
    PolicyInfo,
    RolloutBatch,
    SamplingSettings,
    TaskRef,
    TokenizerInfo,
    decode,
    encode,
)
from ftis.protocol.announcement import (
    ANNOUNCEMENT_BOUNDS,
    Announcement,
    BatchDescriptor,
    Reach,
    decode_announcement,
    encode_announcement,
)
from ftis.protocol.decode import BATCH_BOUNDS
from ftis.protocol.envelope import Bounds, check_shape
from ftis.protocol.limits import (
    MAX_ANNOUNCED_BATCHES,
    MAX_ANNOUNCEMENT_VALUES,
    MAX_ANSWER_CHARS,
    MAX_BATCH_VALUES,
    MAX_DEPTH,
    MAX_GROUPS,
    MAX_MAP_ENTRIES,
    MAX_NAME_CHARS,
    MAX_RELAY_ADDRS,
    MAX_STRING_BYTES,
)

SMALL = Bounds(max_bytes=1 << 20, max_depth=3, max_values=24, max_items=6)
FUZZ = settings(derandomize=True, database=None, deadline=None, max_examples=300)

# --- the obvious walk -------------------------------------------------------------------------------


class Map(list):
    """A map, as its (key, value) pairs: any key."""


class Ext(int):
    """An ext value, as its body's length."""


class TimestampBody(Exception):
    """An ext of type -1 (a timestamp) whose body msgpack refuses: a check of content, as UTF-8 is."""


UNREADABLE = object()


def unpacked(data: bytes) -> Any:
    """The one msgpack value in ``data`` (strings as ``str``, whatever their UTF-8; binaries as ``bytes``), or
    ``UNREADABLE`` if msgpack cannot read ``data`` as exactly one value."""
    try:
        return msgpack.unpackb(data, raw=False, unicode_errors="surrogateescape", strict_map_key=False,
                               object_pairs_hook=Map, ext_hook=lambda code, body: Ext(len(body)))
    except ValueError as error:
        if "timestamp" in str(error):
            raise TimestampBody() from None
        return UNREADABLE
    except Exception:  # every way msgpack refuses bytes
        return UNREADABLE


def within(value: Any, bounds: Bounds) -> bool:
    """Whether an unpacked value keeps to ``bounds``, measured on its objects."""
    values, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        values += 1
        if isinstance(item, Ext | msgpack.Timestamp) and item != 0:
            return False
        if isinstance(item, str) and len(item.encode("utf-8", "surrogateescape")) > MAX_STRING_BYTES:
            return False
        if isinstance(item, list):
            limit = MAX_MAP_ENTRIES if isinstance(item, Map) else bounds.max_items
            if depth > bounds.max_depth or len(item) > limit:
                return False
            stack += [(child, depth + 1) for child in (sum(item, ()) if isinstance(item, Map) else item)]
    return values <= bounds.max_values


def walk_accepts(data: bytes, bounds: Bounds) -> bool:
    try:
        check_shape(data, bounds)
    except DecodeError as error:
        assert error.field == "payload"
        return False
    return True


def agree(data: bytes, bounds: Bounds) -> bool:
    """Assert the walk and the obvious walk agree on ``data``; whether it was accepted."""
    try:
        value = unpacked(data)
    except TimestampBody:
        return False  # msgpack's unpacking refuses it after the walk: nothing to compare
    expected = value is not UNREADABLE and within(value, bounds)
    assert walk_accepts(data, bounds) == expected, data
    return expected


# --- agreement --------------------------------------------------------------------------------------

scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False)
           | st.text(max_size=40) | st.binary(max_size=300))  # fmt: skip
values = st.recursive(scalars, lambda children: st.lists(children, max_size=8)
                      | st.dictionaries(st.text(max_size=4), children, max_size=5), max_leaves=40)


@FUZZ
@given(values)
def test_the_walk_agrees_on_any_value(value):
    data = msgpack.packb(value, use_bin_type=True)
    agree(data, SMALL)
    assert walk_accepts(data, Bounds(1 << 20, 64, 10**6, 10**6))  # a valid message within loose bounds


@FUZZ
@given(values, st.data())
def test_the_walk_agrees_on_any_corruption(value, draw):
    data = bytearray(msgpack.packb(value, use_bin_type=True))
    for _ in range(draw.draw(st.integers(1, 3))):
        at = draw.draw(st.integers(0, len(data)))
        edit = draw.draw(st.sampled_from(["cut", "byte", "insert"]))
        if edit == "cut":
            del data[at:]
        elif edit == "byte" and at < len(data):
            data[at] = draw.draw(st.integers(0, 255))
        else:
            data[at:at] = bytes([draw.draw(st.integers(0, 255))])
    agree(bytes(data), SMALL)


def test_the_walk_agrees_on_corrupted_batches_and_announcements():
    rng = random.Random(5)
    seeds = [(data, BATCH_BOUNDS) for data in batch_seeds().values()]
    seeds += [(data, ANNOUNCEMENT_BOUNDS) for data in announcement_seeds().values()]
    accepted = 0
    for _ in range(3000):
        data, bounds = rng.choice(seeds)
        data = bytearray(data)
        at = rng.randrange(len(data))
        data[at] = rng.choice([rng.randrange(256), 0x90, 0x80, 0xDC, 0xDD, 0xC1, 0xC7, 0xD9, data[at] ^ 1])
        accepted += agree(bytes(data[: rng.choice([len(data), at + 1, at + 3])]), bounds)
    assert 100 < accepted < 2900  # both verdicts, often


# --- each bound, at it and past it ------------------------------------------------------------------


def test_depth_at_and_past_the_bound():
    assert walk_accepts(b"\x91\x91\x90", SMALL)  # 3 containers
    assert walk_accepts(b"\x92\x91\x81\xa1k\x00\x90", SMALL)  # 3, a map's value a scalar at the 4th level
    assert not walk_accepts(b"\x91\x91\x91\x90", SMALL)  # 4, though the 4th is empty
    assert not walk_accepts(b"\x91\x91\x81\xa1k\x90", SMALL)  # 4: a map's value


def test_values_at_and_past_the_bound():
    four_of_five = b"\x94" + (b"\x95" + b"\x00" * 5) * 3 + b"\x92\x00\x00"  # 1 + 4 + 15 + 2 = 22 values
    assert walk_accepts(four_of_five, SMALL)
    assert walk_accepts(four_of_five[:-3] + b"\x94" + b"\x00" * 4, SMALL)  # 24
    assert not walk_accepts(four_of_five[:-3] + b"\x95" + b"\x00" * 5, SMALL)  # 25


def test_a_claim_over_a_bound_is_refused_before_its_items_are_read():
    # 3 bytes: an array claiming 4,097 items, or a map claiming 33 entries, or a string 16,385 bytes; none present
    for data, bound in [(b"\xdc\x10\x01", "item"), (b"\xde\x00\x21", "entr"), (b"\xda\x40\x01", "byte limit")]:
        with pytest.raises(DecodeError, match=bound):
            check_shape(data, BATCH_BOUNDS)
    five_lists = b"\x96" + (b"\xdc\x10\x00" + b"\x00" * MAX_GROUPS) * 5  # 20,486 values
    check_shape(five_lists + b"\x00", BATCH_BOUNDS)
    with pytest.raises(DecodeError, match=f"more than {MAX_BATCH_VALUES} values"):
        check_shape(five_lists + b"\xdc\x10\x00", BATCH_BOUNDS)  # a sixth claims 4,096 more, none present


@pytest.mark.parametrize(("data", "reason"), [
    (b"", "truncated"), (b"\x92\x00", "truncated"), (b"\xc4\x05abc", "truncated"), (b"\xcd\x01", "truncated"),
    (b"\x90\x90", "trailing"), (b"\xc4\x01ab", "trailing"), (b"\xc1", "reserved"), (b"\xd4\x05\x00", "ext"),
])  # fmt: skip
def test_framing(data, reason):
    with pytest.raises(DecodeError, match=reason):
        check_shape(data, BATCH_BOUNDS)


def test_an_empty_ext_passes_the_walk_for_the_schema_to_refuse():
    check_shape(b"\xc7\x00\x05", BATCH_BOUNDS)


# --- the schema's bounds pass every valid message ---------------------------------------------------


def values_in(data: bytes) -> tuple[int, int]:
    """The values in a message and its containers' deepest nesting, measured on its objects."""
    count, deepest, stack = 0, 0, [(msgpack.unpackb(data, strict_map_key=False), 1)]
    while stack:
        item, depth = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack += [(child, depth + 1) for pair in item.items() for child in pair]
        elif isinstance(item, list):
            stack += [(child, depth + 1) for child in item]
        deepest = max(deepest, depth - 1 + isinstance(item, dict | list))
    return count, deepest


def test_a_batch_at_the_limits_passes():
    """MAX_GROUPS groups, each field present (texts too), in the longest strings and the widest integers."""
    completion = Completion(np.array([1]), np.array([-0.5]), 1.0, "stop", text="🙂")
    groups = tuple(Group(f"{k:0{MAX_NAME_CHARS}d}", TaskRef("d" * MAX_NAME_CHARS, "s" * MAX_NAME_CHARS, 2**63 - 1,
                                                             "🙂" * MAX_ANSWER_CHARS if k == 0 else str(k)),
                         np.array([7]), (completion,)) for k in range(MAX_GROUPS))
    batch = RolloutBatch("r" * MAX_NAME_CHARS, "p", 2**40 - 1, 1.7e9, PolicyInfo("m", "v", "lora", 2**63 - 1),
                         TokenizerInfo("f", 200), SamplingSettings(1.0, 1.0, 0, 8), groups)
    data = encode(batch)
    assert decode(data) == batch
    count, deepest = values_in(data)
    assert deepest == MAX_DEPTH
    assert 5 * MAX_GROUPS < count <= MAX_BATCH_VALUES < count + 600  # the slack: each map counted at its limit


def test_an_announcement_at_the_limits_passes():
    relay = "12D3KooW" + "R" * 44
    addrs = tuple(f"/ip4/203.0.113.{i}/tcp/4001/p2p/{relay}/p2p-circuit" for i in range(MAX_RELAY_ADDRS))
    batches = tuple(BatchDescriptor(i, 1, 1, 1, bytes(32), 0, 0.0) for i in range(MAX_ANNOUNCED_BATCHES))
    announcement = Announcement("r", "12D3KooW" + "P" * 44, "m", "full", "t", 0, 0, 0, 0.0, batches,
                                Reach("relayed", addrs))
    data = encode_announcement(announcement)
    assert decode_announcement(data) == announcement
    count, deepest = values_in(data)
    assert deepest == MAX_DEPTH
    assert count <= MAX_ANNOUNCEMENT_VALUES
