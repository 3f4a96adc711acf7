"""Payloads of nested empty msgpack containers (``helpers/msgpack_bombs.py``) are refused from their headers, before
msgpack builds an object of them: by ``decode`` and ``read``, by a default node's ``Inbox.open`` (charged to the
peer as a decode error) and by ``decode_announcement``, each allocating a few kilobytes where unpacking would take
~70 bytes per byte of payload (16 MiB: over 1 GB). ``tests/test_cli.py`` checks ``ftis-node inspect`` of them.

Run: python -m pytest tests/test_protocol_bombs.py -q
"""

import hashlib
import tracemalloc
from collections.abc import Callable

import pytest
from helpers.msgpack_bombs import EMPTY_ARRAY, EMPTY_MAP, array_header, deep, in_a_batch, wide
from helpers.swarm import T0, TOKENIZER, FakeClock

from ftis.node.config import SwarmConfig
from ftis.node.swarm.exchange.inbox import Inbox
from ftis.node.swarm.exchange.limits import inbox_limits
from ftis.node.swarm.exchange.payload import Rejected
from ftis.node.swarm.exchange.reasons import DECODE_ERROR
from ftis.protocol import DecodeError, decode, read
from ftis.protocol.announcement import BatchDescriptor, decode_announcement
from ftis.protocol.limits import MAX_ANNOUNCEMENT_BYTES

MiB = 1 << 20
PAYLOADS = {
    "wide-16MiB": lambda: wide(16 * MiB),  # ~16.8 million empty arrays, 3 levels deep
    "wide-maps-16MiB": lambda: wide(16 * MiB, EMPTY_MAP),
    "deep-1000": lambda: deep(1000),  # 4 MB: 1,000 levels of 4,096 items
    "in-a-batch-16MiB": lambda: in_a_batch(wide(16 * MiB)),  # as body.groups.group_id
}


def peak_of(call: Callable[[], object]) -> tuple[BaseException, int]:
    """What ``call`` raised and the most bytes it held allocated at once (tracemalloc)."""
    tracemalloc.start()
    try:
        call()
    except Exception as error:  # the refusal, returned for the test to check
        return error, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    raise AssertionError("accepted a payload of nested empty containers")


SMALL = 64 * 1024  # bytes: under 2% of the smallest payload here; unpacking one takes ~7,000%


@pytest.fixture(scope="module", params=list(PAYLOADS))
def payload(request) -> bytes:
    return PAYLOADS[request.param]()


@pytest.mark.parametrize("decoder", [decode, read], ids=["decode", "read"])
def test_the_decoder_refuses_nested_empty_containers_before_building_them(payload, decoder):
    error, peak = peak_of(lambda: decoder(payload))
    assert peak < SMALL, f"{peak:,} bytes allocated refusing {len(payload):,} bytes"
    assert isinstance(error, DecodeError) and error.field == "payload", error


def test_a_default_node_charges_them_as_a_decode_error_at_low_memory(payload):
    inbox = Inbox("run-a", TOKENIZER, inbox_limits(SwarmConfig()), FakeClock())
    descriptor = BatchDescriptor(round=1, groups=1, tokens=1, bytes=len(payload),
                                 sha256=hashlib.sha256(payload).digest(), policy_version=0, created_at=T0)
    error, peak = peak_of(lambda: inbox.open("mallory", descriptor, payload))
    assert peak < SMALL, f"{peak:,} bytes allocated refusing {len(payload):,} bytes"
    assert isinstance(error, Rejected) and error.reason == DECODE_ERROR, error


def test_an_announcement_of_nested_empty_containers_is_refused():
    data = array_header(2) + (array_header(4000) + EMPTY_ARRAY * 4000) * 2  # 8,009 bytes: 8,000 empty arrays
    assert len(data) <= MAX_ANNOUNCEMENT_BYTES
    error, peak = peak_of(lambda: decode_announcement(data))
    assert peak < SMALL, f"{peak:,} bytes allocated"  # unpacking them takes ~500 KB
    assert isinstance(error, DecodeError) and error.field == "payload", error
