"""Announcements: what a peer says about itself and its recent batches in the DHT.

Wire form: ``{"v": 3, "kind": "announcement", "body": {...}}`` (v2: the same under ``"v": 2``) with

    run_id, peer_id, model: str;  adapter: "full"|"lora";  tokenizer: str (fingerprint)
    policy_version, published_batches, published_tokens: int;  updated_at: float (unix seconds)
    batches: [{seq: int (the batch's round), groups: int, tokens: int, bytes: int, sha256: bin(32),
               policy_version: int, created_at: float}]      at most MAX_ANNOUNCED_BATCHES
    reach:   {how: one of REACH_HOW, addrs: [str]}           v2 and v3 (a v1 announcement's reach is unknown)

``reach.addrs`` are the circuit addresses of a relayed peer (1 to MAX_RELAY_ADDRS of them, none otherwise), each
``<relay's address>/p2p/<relay id>/p2p-circuit``, optionally followed by ``/p2p/<the announcing peer>``: what
libp2p advertises for a node that holds a relay slot. They inform (``ftis-node status``, a fetch's accounting);
a fetch dials the peer id, never an address a peer wrote, so a false one misleads nobody's dialler.

A receiver fetches a listed batch from the peer, checks its size and SHA-256 against the
announcement (which the DHT only accepts signed by the peer's key), then decodes it. Decoding is
strict and total like ``decode``: a ``DecodeError`` names the field, nothing is half built; its msgpack is
bounded from its headers before any object is built (``envelope.py``, ``ANNOUNCEMENT_BOUNDS``).
"""

import builtins
import re
from dataclasses import dataclass

import msgpack

from ftis.protocol.envelope import Bounds, unpack_message
from ftis.protocol.errors import DecodeError, EncodeError
from ftis.protocol.limits import (
    ADAPTERS,
    MAX_ANNOUNCED_BATCHES,
    MAX_ANNOUNCEMENT_BYTES,
    MAX_ANNOUNCEMENT_VALUES,
    MAX_BATCH_TOKENS,
    MAX_DEPTH,
    MAX_GROUPS,
    MAX_MULTIADDR_CHARS,
    MAX_NAME_CHARS,
    MAX_PAYLOAD_BYTES,
    MAX_RELAY_ADDRS,
    MAX_ROUND,
    PROTOCOL_VERSION,
    REACH_HOW,
    SHA256_BYTES,
)
from ftis.protocol.reader import FieldReader

KIND_ANNOUNCEMENT = "announcement"
# Its lists are bounded by the values in all (one longer than the schema allows is refused naming its field).
ANNOUNCEMENT_BOUNDS = Bounds(max_bytes=MAX_ANNOUNCEMENT_BYTES, max_depth=MAX_DEPTH,
                             max_values=MAX_ANNOUNCEMENT_VALUES, max_items=MAX_ANNOUNCEMENT_VALUES)
_INT64_MAX = (1 << 63) - 1
_MAX_TIME = 1e11
_PEER_ID = r"[1-9A-HJ-NP-Za-km-z]{32,128}"  # libp2p's base58 form
# A relay's address (components of letters, digits and ``.:-_%``), its peer id, the circuit, maybe our peer id.
_CIRCUIT = re.compile(rf"\A(?:/[0-9A-Za-z.:_%-]+)+/p2p/(?P<relay>{_PEER_ID})/p2p-circuit(?:/p2p/(?P<peer>[^/]+))?\Z")


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
class Reach:
    """How peers reach the announcing peer (``REACH_HOW``), and its circuit addresses when relayed."""

    how: str = "unknown"
    addrs: tuple[str, ...] = ()

    @property
    def relays(self) -> tuple[str, ...]:
        """The peer ids of the relays that hold a slot for it, in order, each once."""
        return tuple(dict.fromkeys(relay_of(addr) for addr in self.addrs))


def relay_of(circuit_addr: str) -> str:
    """The relay's peer id in a circuit address (``ValueError`` if it is none)."""
    match = _CIRCUIT.match(circuit_addr)
    if match is None or circuit_addr.count("/p2p-circuit") != 1:
        raise ValueError(f"not a circuit address: {circuit_addr[:MAX_MULTIADDR_CHARS]!r}")
    return match["relay"]


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
    reach: Reach = Reach()


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
        "reach": {"how": announcement.reach.how, "addrs": list(announcement.reach.addrs)},
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
    version, body = unpack_message(data, KIND_ANNOUNCEMENT, ANNOUNCEMENT_BOUNDS)
    peer_id = body.text("peer_id", MAX_NAME_CHARS)
    result = Announcement(
        run_id=body.text("run_id", MAX_NAME_CHARS),
        peer_id=peer_id,
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
        reach=Reach() if version < 2 else _reach(body.map("reach"), peer_id),
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


def _reach(reader: FieldReader, peer_id: str) -> Reach:
    how = reader.choice("how", REACH_HOW)
    addrs = reader.array("addrs", 0, MAX_RELAY_ADDRS)
    reader.done()
    for i, addr in enumerate(addrs):
        where = f"{reader.path('addrs')}[{i}]"
        if type(addr) is not str or len(addr) > MAX_MULTIADDR_CHARS:
            raise DecodeError(where, f"expected a string of at most {MAX_MULTIADDR_CHARS} characters")
        try:
            relay = relay_of(addr)
        except ValueError as error:
            raise DecodeError(where, str(error)) from None
        match = _CIRCUIT.match(addr)
        if relay == peer_id or (match is not None and match["peer"] not in (None, peer_id)):
            raise DecodeError(where, "a circuit address relays to the announcing peer through another peer")
    if len(set(addrs)) != len(addrs):
        raise DecodeError(reader.path("addrs"), "addresses must be unique")
    if (how == "relayed") != bool(addrs):
        raise DecodeError(reader.path("addrs"), "a relayed peer lists its circuit addresses, and only it does")
    return Reach(how, tuple(addrs))
