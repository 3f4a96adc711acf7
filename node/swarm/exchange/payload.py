"""A fetched payload checked against its signed announcement (size, SHA-256) and opened: ``Rejected`` names the
reason. ``Inbox.open`` opens a transport's payloads within its memory bound; ``open_payload`` is for a tool."""

import hashlib

from ftis.node.swarm.exchange.reasons import DECODE_ERROR, FETCH_FAILED, HASH_MISMATCH, TOO_LARGE
from ftis.protocol import DecodeError, RolloutBatch, read
from ftis.protocol.announcement import BatchDescriptor


class Rejected(Exception):
    """A fetched payload refused for ``reason`` (one of the reasons above)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


def check_payload(descriptor: BatchDescriptor, data: bytes) -> None:
    """``Rejected`` unless the payload is exactly the announced one's bytes: its size and SHA-256."""
    if len(data) != descriptor.bytes:
        raise Rejected(TOO_LARGE if len(data) > descriptor.bytes else FETCH_FAILED,
                       f"{len(data)} bytes, {descriptor.bytes} announced")
    if hashlib.sha256(data).digest() != descriptor.sha256:
        raise Rejected(HASH_MISMATCH, "the payload's SHA-256 differs from the signed announcement's")


def open_payload(descriptor: BatchDescriptor, data: bytes) -> RolloutBatch:
    """The batch in a payload, if it is exactly the announced one: size, hash, strict decode, every column
    inflated (what a benchmark or a tool opens; a transport opens through ``Inbox.open``, which bounds memory)."""
    check_payload(descriptor, data)
    try:
        return read(data).inflate()
    except DecodeError as error:
        raise Rejected(DECODE_ERROR, str(error)) from None
