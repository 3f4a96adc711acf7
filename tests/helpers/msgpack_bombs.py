"""Hostile payloads of nested empty msgpack containers: each is 1 byte on the wire and a 56-64-byte Python object
once unpacked, so a decoder that unpacks first would build ~70 bytes of objects per byte of payload.

``wide``: arrays of arrays of ``WIDE`` empty containers, up to a size (16 MiB: ~16.8 million of them);
``deep``: ``levels`` arrays nested in one another, each holding ``WIDE`` - 1 empty arrays beside the next;
``in_a_batch``: a batch's envelope whose ``body.groups.group_id`` is such a payload.
"""

import msgpack

EMPTY_ARRAY, EMPTY_MAP = b"\x90", b"\x80"
WIDE = 4096  # the longest array a decoder unpacks (MAX_GROUPS, msgpack's max_array_len in the decoder)


def array_header(n: int) -> bytes:
    return b"\xdc" + n.to_bytes(2, "big")  # array 16


def wide(size: int, leaf: bytes = EMPTY_ARRAY) -> bytes:
    """At most ``size`` bytes (up to 64 MiB): an array of arrays of up to ``WIDE`` rows, each row an array of
    ``WIDE`` ``leaf`` containers."""
    row = array_header(WIDE) + leaf * WIDE
    rows = (size - 3 - 3 * WIDE) // len(row)
    blocks = [min(WIDE, rows - start) for start in range(0, rows, WIDE)]
    return array_header(len(blocks)) + b"".join(array_header(n) + row * n for n in blocks)


def deep(levels: int) -> bytes:
    """``levels`` nested arrays, each of ``WIDE`` items: ``WIDE`` - 1 empty arrays, then the next level (the last
    level's last item is an empty array too). Within msgpack's own limit of 1024 levels for ``levels`` < 1024."""
    return (array_header(WIDE) + EMPTY_ARRAY * (WIDE - 1)) * levels + EMPTY_ARRAY


def in_a_batch(payload: bytes) -> bytes:
    """A v3 batch's envelope with ``payload`` as its groups' ids, the rest of the batch missing."""
    marker = "<payload goes here>"
    message = msgpack.packb({"v": 3, "kind": "batch", "body": {"groups": {"group_id": marker}}})
    return message.replace(msgpack.packb(marker), payload, 1)
