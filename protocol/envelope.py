"""A message's envelope: its msgpack checked from the headers alone, then unpacked, its version and kind read.

Every message (a batch, an announcement) is one msgpack map ``{"v": …, "kind": …, "body": {…}}``. Before msgpack
builds a single Python object, ``check_shape`` walks the bytes header by header, building nothing and copying
nothing, and refuses a message that is not exactly one complete msgpack value (truncated, trailing bytes, a
reserved byte) or that holds what its schema never can (``Bounds``): containers nested deeper, more values in all,
a longer array or map, a longer string, an ext value. Only then does ``msgpack.unpackb`` build the objects.

Why: an empty array or map is 1 byte of msgpack and a 56-64-byte Python object, so a payload of nested empty
arrays would unpack to ~70 bytes per byte (a 64 MiB payload, the batch limit, to ~4.6 GiB) before any schema
check. Bounded from the headers, what unpacking builds is at most ``max_values`` small objects plus the strings'
and binaries' own bytes (a copy of at most the payload); and every item an array claims is known to be present,
so msgpack's allocating a claimed length on reading a header is backed by the input.

The walk is O(values), never O(bytes) in Python: a string or binary's body is stepped over by its length.
"""

import struct
from dataclasses import dataclass
from typing import Any

import msgpack

from ftis.protocol.errors import DecodeError
from ftis.protocol.limits import MAX_MAP_ENTRIES, MAX_NAME_CHARS, MAX_STRING_BYTES, SUPPORTED_VERSIONS
from ftis.protocol.reader import FieldReader

_INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class Bounds:
    """What one kind of message may hold, checked from its msgpack headers before anything is built."""

    max_bytes: int  # the whole message
    max_depth: int  # containers nested, the envelope counted: a value inside the deepest is a scalar
    max_values: int  # every msgpack value together: containers, keys and scalars
    max_items: int  # in one array


def unpack_message(data: bytes, kind: str, bounds: Bounds) -> tuple[int, FieldReader]:
    """The version and body of a message of ``kind`` (the envelope checked: size, shape, msgpack, version, kind)."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise DecodeError("payload", f"expected bytes, got {type(data).__name__}")
    if isinstance(data, memoryview):
        data = _bytes_view(data)
    if len(data) > bounds.max_bytes:
        raise DecodeError("payload", f"{len(data)} bytes is over the {bounds.max_bytes}-byte limit")
    check_shape(data, bounds)
    envelope = FieldReader(_unpack(data, bounds), "")
    version = envelope.integer("v", 0, _INT64_MAX)
    if version not in SUPPORTED_VERSIONS:
        raise DecodeError("v", f"unknown protocol version {version}; this build reads {sorted(SUPPORTED_VERSIONS)}")
    found = envelope.text("kind", MAX_NAME_CHARS)
    if found != kind:
        raise DecodeError("kind", f"expected a {kind!r} message, got {found!r}")
    body = envelope.map("body")
    envelope.done()
    return version, body


def _bytes_view(data: memoryview) -> memoryview:
    try:
        return data.cast("B")  # one item a byte, whatever the view's format was
    except TypeError:
        raise DecodeError("payload", "expected contiguous bytes") from None


def _unpack(data: bytes, bounds: Bounds) -> Any:
    """The message's objects; ``check_shape`` has passed, so msgpack's own limits are a second line."""
    try:
        return msgpack.unpackb(
            data,
            raw=False,
            strict_map_key=True,
            object_pairs_hook=_unique_keys,
            max_str_len=MAX_STRING_BYTES,
            max_bin_len=bounds.max_bytes,
            max_array_len=bounds.max_items,
            max_map_len=MAX_MAP_ENTRIES,
            max_ext_len=0,
        )
    except DecodeError:
        raise
    except Exception as error:  # msgpack raises several types for malformed input; all mean the same
        raise DecodeError("payload", f"not a valid msgpack message ({type(error).__name__}: {error})") from None


def _unique_keys(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise DecodeError("payload", "a map repeats a key")
    return result


# --- the walk ---------------------------------------------------------------------------------------

# What a msgpack value's first byte says. ``_STEPS``: the whole value's size when it is fixed by that byte (a number,
# nil, a boolean, a fixstr: what a batch's lists hold), else 0. ``_LEADS``, for the others: the value's kind, its
# header's size, and its length (of a string, binary or ext's body, which follows the header; of an array's items
# or a map's entries, which follow as values of their own): in the first byte itself (an int), or a big-endian
# field right after it (a Struct).
_STR, _BIN, _EXT, _RESERVED, _ARRAY, _MAP = range(6)  # the containers last
_U8, _U16, _U32 = struct.Struct(">B"), struct.Struct(">H"), struct.Struct(">I")
_FIXED = {0xC0: 1, 0xC2: 1, 0xC3: 1, 0xCA: 5, 0xCB: 9,  # nil, false, true, float32, float64
          0xCC: 2, 0xCD: 3, 0xCE: 5, 0xCF: 9, 0xD0: 2, 0xD1: 3, 0xD2: 5, 0xD3: 9}  # uint8-64, int8-64
_VARIABLE: dict[int, tuple[int, int, struct.Struct | int]] = {
    0xC1: (_RESERVED, 1, 0),
    0xC4: (_BIN, 2, _U8), 0xC5: (_BIN, 3, _U16), 0xC6: (_BIN, 5, _U32),
    0xC7: (_EXT, 3, _U8), 0xC8: (_EXT, 4, _U16), 0xC9: (_EXT, 6, _U32),  # the length, then the ext's type byte
    0xD4: (_EXT, 2, 1), 0xD5: (_EXT, 2, 2), 0xD6: (_EXT, 2, 4), 0xD7: (_EXT, 2, 8), 0xD8: (_EXT, 2, 16),
    0xD9: (_STR, 2, _U8), 0xDA: (_STR, 3, _U16), 0xDB: (_STR, 5, _U32),
    0xDC: (_ARRAY, 3, _U16), 0xDD: (_ARRAY, 5, _U32), 0xDE: (_MAP, 3, _U16), 0xDF: (_MAP, 5, _U32),
}  # fmt: skip


def _step(byte: int) -> int:
    if byte <= 0x7F or byte >= 0xE0:  # a positive or negative fixint
        return 1
    if 0xA0 <= byte <= 0xBF:  # a fixstr: this byte, then up to 31 bytes
        return 1 + (byte & 0x1F)
    return _FIXED.get(byte, 0)


def _lead(byte: int) -> tuple[int, int, struct.Struct | int]:
    if 0x80 <= byte <= 0x8F:
        return _MAP, 1, byte & 0x0F
    if 0x90 <= byte <= 0x9F:
        return _ARRAY, 1, byte & 0x0F
    return _VARIABLE[byte]


_STEPS = tuple(_step(byte) for byte in range(256))
_LEADS: tuple[Any, ...] = tuple(None if _STEPS[byte] else _lead(byte) for byte in range(256))  # read unchecked: hot


def check_shape(data: bytes, bounds: Bounds) -> None:
    """Refuse ``data`` (``DecodeError`` on "payload") unless it is exactly one complete msgpack value within
    ``bounds``, reading only its headers.

    A container's values are counted, and its depth checked, when its header is read, before any of them is: what
    a header claims is refused before it is walked, and a count is kept per container, not per value."""
    max_depth, max_values, max_items = bounds.max_depth, bounds.max_values, bounds.max_items
    values, at = 1, 0
    left = [1]  # (depth + 1,) values still to read in each open container, the outermost (the message: 1) first
    try:
        while left:
            count = left.pop()
            for i in range(count):  # the values of the innermost open container, at depth len(left)
                step = _STEPS[data[at]]  # IndexError: the message ends where a value should start
                if step:
                    at += step
                    continue
                kind, size, length = _LEADS[data[at]]
                n = length if type(length) is int else length.unpack_from(data, at + 1)[0]  # struct.error: cut
                at += size
                if kind in (_STR, _BIN):
                    if kind == _STR and n > MAX_STRING_BYTES:
                        raise DecodeError("payload", f"a string of {n} bytes is over the {MAX_STRING_BYTES}-byte limit")
                    at += n  # its body, stepped over unread
                elif kind >= _ARRAY:
                    if len(left) >= max_depth:
                        raise DecodeError("payload", f"containers nested deeper than {max_depth} levels, deeper than "
                                                     "its schema's deepest")
                    n = _values_in(kind, n, max_items)
                    values += n
                    if values > max_values:
                        raise DecodeError("payload", f"holds more than {max_values} values, more than its schema can")
                    if n:
                        left += (count - i - 1, n)  # the rest of this container, under the new one
                        break
                elif kind == _EXT and n:  # an empty ext goes on: msgpack builds it, and the schema refuses its type
                    raise DecodeError("payload", "an ext value: the format has none")
                elif kind == _RESERVED:
                    raise DecodeError("payload", "a reserved byte (0xc1): not msgpack")
    except (IndexError, struct.error):
        raise _truncated() from None
    if at > len(data):  # the last value's body runs past the end
        raise _truncated()
    if at < len(data):
        raise DecodeError("payload", "trailing bytes after the message")


def _values_in(kind: int, n: int, max_items: int) -> int:
    """The values an array of ``n`` items or a map of ``n`` entries holds, once ``n`` passed its limit."""
    if kind == _MAP:
        if n > MAX_MAP_ENTRIES:
            raise DecodeError("payload", f"a map of {n} entries is over the {MAX_MAP_ENTRIES}-entry limit")
        return 2 * n
    if n > max_items:
        raise DecodeError("payload", f"an array of {n} items is over the {max_items}-item limit")
    return n


def _truncated() -> DecodeError:
    return DecodeError("payload", "truncated: the message ends inside a value")
