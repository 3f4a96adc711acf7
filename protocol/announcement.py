"""Protocol-v1 announcements: what a peer says about itself and its recent batches in the DHT.

Wire form: ``{"v": 1, "kind": "announcement", "body": {...}}`` with

    run_id, peer_id, model: str;  adapter: "full"|"lora";  tokenizer: str (fingerprint)
    policy_version, published_batches, published_tokens: int;  updated_at: float (unix seconds)
    batches: [{seq: int (the batch's round), groups: int, tokens: int, bytes: int, sha256: bin(32),
               policy_version: int, created_at: float}]      at most MAX_ANNOUNCED_BATCHES

A receiver fetches a listed batch from the peer, checks its size and SHA-256 against the
announcement (which the DHT only accepts signed by the peer's key), then decodes it. Decoding is
strict and total like ``decode``: a ``DecodeError`` names the field, nothing is half built.
"""

import builtins
from dataclasses import dataclass

import msgpack

from ftis.protocol.decode import unpack_message
from ftis.protocol.errors import DecodeError, EncodeError
from ftis.protocol.limits import (
    ADAPTERS,
    MAX_ANNOUNCED_BATCHES,
    MAX_ANNOUNCEMENT_BYTES,
    MAX_BATCH_TOKENS,
    MAX_GROUPS,
    MAX_NAME_CHARS,
    MAX_PAYLOAD_BYTES,
    MAX_ROUND,
    PROTOCOL_VERSION,
    SHA256_BYTES,
)
from ftis.protocol.reader import FieldReader

KIND_ANNOUNCEMENT = "announcement"
_INT64_MAX = (1 << 63) - 1
_MAX_TIME = 1e11


@dataclass(frozen=True)
class BatchDescriptor:
    round: int  # the batch's round (the wire key "seq")
    groups: int
    tokens: int  # completion tokens
    bytes: int  # encoded size: a fetch refuses a payload that claims more
    sha256: builtins.bytes  # of the encoded batch (the field above shadows the type's name)
    policy_version: int
    created_at: float


@dataclass(frozen=True)
class Announcement:
    run_id: str
    peer_id: str
    model: str
    adapter: str
    tokenizer: str  # fingerprint
    policy_version: int
    published_batches: int
    published_tokens: int
    updated_at: float
    batches: tuple[BatchDescriptor, ...]


def encode_announcement(announcement: Announcement) -> bytes:
    body = {
        "run_id": announcement.run_id,
        "peer_id": announcement.peer_id,
        "model": announcement.model,
        "adapter": announcement.adapter,
        "tokenizer": announcement.tokenizer,
        "policy_version": announcement.policy_version,
        "published_batches": announcement.published_batches,
        "published_tokens": announcement.published_tokens,
        "updated_at": announcement.updated_at,
        "batches": [
            {
                "seq": d.round,
                "groups": d.groups,
                "tokens": d.tokens,
                "bytes": d.bytes,
                "sha256": d.sha256,
                "policy_version": d.policy_version,
                "created_at": d.created_at,
            }
            for d in announcement.batches
        ],
    }
    try:
        data = msgpack.packb({"v": PROTOCOL_VERSION, "kind": KIND_ANNOUNCEMENT, "body": body}, use_bin_type=True)
    except (TypeError, ValueError, OverflowError) as error:
        raise EncodeError("announcement", f"cannot be packed ({error})") from None
    try:
        decode_announcement(data)
    except DecodeError as error:
        raise EncodeError(error.field, error.reason) from None
    return data


def decode_announcement(data: bytes) -> Announcement:
    body = unpack_message(data, KIND_ANNOUNCEMENT, MAX_ANNOUNCEMENT_BYTES)
    result = Announcement(
        run_id=body.text("run_id", MAX_NAME_CHARS),
        peer_id=body.text("peer_id", MAX_NAME_CHARS),
        model=body.text("model", MAX_NAME_CHARS),
        adapter=body.choice("adapter", ADAPTERS),
        tokenizer=body.text("tokenizer", MAX_NAME_CHARS),
        policy_version=body.integer("policy_version", 0, _INT64_MAX),
        published_batches=body.integer("published_batches", 0, _INT64_MAX),
        published_tokens=body.integer("published_tokens", 0, _INT64_MAX),
        updated_at=body.number("updated_at", 0.0, _MAX_TIME),
        batches=tuple(
            _descriptor(FieldReader(value, f"body.batches[{i}]"))
            for i, value in enumerate(body.array("batches", 0, MAX_ANNOUNCED_BATCHES))
        ),
    )
    body.done()
    rounds = [d.round for d in result.batches]
    if len(set(rounds)) != len(rounds):
        raise DecodeError("body.batches", "rounds must be unique")
    return result


def _descriptor(reader: FieldReader) -> BatchDescriptor:
    sha256 = reader.blob("sha256", SHA256_BYTES)
    if len(sha256) != SHA256_BYTES:
        raise DecodeError(reader.path("sha256"), f"must be {SHA256_BYTES} bytes")
    result = BatchDescriptor(
        round=reader.integer("seq", 0, MAX_ROUND),
        groups=reader.integer("groups", 1, MAX_GROUPS),
        tokens=reader.integer("tokens", 1, MAX_BATCH_TOKENS),
        bytes=reader.integer("bytes", 1, MAX_PAYLOAD_BYTES),
        sha256=sha256,
        policy_version=reader.integer("policy_version", 0, _INT64_MAX),
        created_at=reader.number("created_at", 0.0, _MAX_TIME),
    )
    reader.done()
    return result
