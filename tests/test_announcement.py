"""Announcements: the round trip, strict decoding (v2's ``reach`` included: a hostile peer's addresses), and an
encoder that refuses what the decoder would.

Run: python -m pytest tests/test_announcement.py -q

Bad messages are made from a valid one (``mutated``): unpack it with msgpack, change one thing, pack it
again, so each case differs from a valid announcement in exactly the way its name says, and the
``DecodeError`` must name the field that changed.
"""

import copy
import dataclasses
import hashlib
from typing import Any

import msgpack
import pytest

from ftis.protocol import DecodeError, EncodeError
from ftis.protocol.announcement import (
    Announcement,
    BatchDescriptor,
    Reach,
    decode_announcement,
    encode_announcement,
    relay_of,
)
from ftis.protocol.limits import (
    MAX_ANNOUNCED_BATCHES,
    MAX_ANNOUNCEMENT_BYTES,
    MAX_MULTIADDR_CHARS,
    MAX_NAME_CHARS,
    MAX_RELAY_ADDRS,
    PROTOCOL_VERSION,
    SHA256_BYTES,
)

NOW = 1_700_000_000.25
PEER = "12D3KooW" + "Ab3xY9" * 7 + "Zq"  # 52 characters, like a base58 libp2p peer id
RELAY = "12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"
CIRCUIT = f"/ip4/203.0.113.7/tcp/31337/p2p/{RELAY}/p2p-circuit"


def descriptor(round_: int, **changes: Any) -> BatchDescriptor:
    """A realistic descriptor: 64 groups of 8 completions of ~400 tokens, ~1.5 bytes a token."""
    fields = dict(round=round_, groups=64, tokens=200_000, bytes=310_000,
                  sha256=hashlib.sha256(b"%d" % round_).digest(), policy_version=1_234, created_at=NOW - 10.5 * round_)
    return BatchDescriptor(**{**fields, **changes})


def announcement(count: int = 3, **changes: Any) -> Announcement:
    """A realistic announcement listing ``count`` batches: a hivemind peer id, a hub model name, a sha256
    tokenizer fingerprint."""
    fields = dict(
        run_id="gsm8k-qwen-run-1",
        peer_id=PEER,
        model="Qwen/Qwen2.5-1.5B-Instruct",
        adapter="lora",
        tokenizer="sha256:" + hashlib.sha256(b"tokenizer").hexdigest(),
        policy_version=1_234,
        published_batches=10_000,
        published_tokens=2_000_000_000,
        updated_at=NOW,
        batches=tuple(descriptor(1_000 + i) for i in range(count)),
    )
    return Announcement(**{**fields, **changes})


def mutated(change) -> bytes:
    """The valid announcement's bytes after ``change(message)`` edited its unpacked message in place."""
    message = copy.deepcopy(msgpack.unpackb(encode_announcement(announcement()), raw=False))
    change(message)
    return msgpack.packb(message, use_bin_type=True)


def reach_set(how: str, addrs: list[Any]):
    return lambda m: m["body"].__setitem__("reach", {"how": how, "addrs": addrs})


def body_set(key: str, value: Any):
    return lambda m: m["body"].__setitem__(key, value)


def first_batch_set(key: str, value: Any):
    return lambda m: m["body"]["batches"][0].__setitem__(key, value)


# --- round trip -------------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [0, 1, MAX_ANNOUNCED_BATCHES])
def test_round_trip(count):
    original = announcement(count)
    assert decode_announcement(encode_announcement(original)) == original


@pytest.mark.parametrize("reach", [
    Reach(), Reach("direct"), Reach("unreachable"), Reach("relayed", (CIRCUIT,)),
    Reach("relayed", (f"{CIRCUIT}/p2p/{PEER}", "/ip6/2001:db8::7/udp/4001/quic-v1/p2p/" + RELAY + "/p2p-circuit",
                      f"/dns4/relay.example.org/tcp/443/p2p/{RELAY[:-1]}Y/p2p-circuit")),
], ids=["unknown", "direct", "unreachable", "relayed", "relayed-several"])
def test_reach_round_trip(reach):
    original = announcement(MAX_ANNOUNCED_BATCHES, reach=reach)
    data = encode_announcement(original)
    assert msgpack.unpackb(data)["v"] == PROTOCOL_VERSION
    assert decode_announcement(data) == original


def test_a_v1_announcement_has_no_reach():
    message = msgpack.unpackb(encode_announcement(announcement()), raw=False)
    message["v"] = 1
    del message["body"]["reach"]
    assert decode_announcement(msgpack.packb(message, use_bin_type=True)) == announcement()


def test_v2_and_v3_announcements_are_alike():
    original = announcement(reach=Reach("relayed", (CIRCUIT,)))
    message = msgpack.unpackb(encode_announcement(original), raw=False)
    assert message["v"] == 3
    for version in (2, 3):
        assert decode_announcement(msgpack.packb({**message, "v": version}, use_bin_type=True)) == original


def test_relays_of_a_reach():
    other = f"/ip4/198.51.100.2/tcp/1/p2p/{RELAY[:-1]}Y/p2p-circuit/p2p/{PEER}"
    reach = Reach("relayed", (CIRCUIT, f"{CIRCUIT[:-12]}/p2p-circuit/p2p/{PEER}", other))
    assert reach.relays == (RELAY, RELAY[:-1] + "Y")
    assert relay_of(CIRCUIT) == RELAY
    for not_circuit in (f"/ip4/1.2.3.4/tcp/1/p2p/{RELAY}", f"{CIRCUIT}/p2p/{RELAY}/p2p-circuit", "p2p-circuit", ""):
        with pytest.raises(ValueError):
            relay_of(not_circuit)


def test_round_trip_at_the_name_limits():
    long = "x" * MAX_NAME_CHARS
    original = announcement(MAX_ANNOUNCED_BATCHES, run_id=long, peer_id=long, model=long, tokenizer=long)
    data = encode_announcement(original)
    assert len(data) <= MAX_ANNOUNCEMENT_BYTES
    assert decode_announcement(data) == original


def test_typical_announcement_is_small():
    """What one peer keeps in the DHT: small, because DHT values of ~60 KiB crash hivemind's DHT
    process and a shard's whole dictionary travels in one 4 MiB message (docs/swarm.md).

    Measured: 2,220 bytes for MAX_ANNOUNCED_BATCHES realistic descriptors, about 120 bytes each of
    which 57 are the map's key names. The 2 KiB once aimed at is not met by this layout."""
    size = len(encode_announcement(announcement(MAX_ANNOUNCED_BATCHES)))
    assert size < 2.5 * 1024
    assert size < MAX_ANNOUNCEMENT_BYTES / 3


# --- strict decoding --------------------------------------------------------------------------------

MALFORMED = {
    # envelope
    "version_4": (lambda m: m.__setitem__("v", 4), "v"),
    "version_1_with_reach": (lambda m: m.__setitem__("v", 1), "body"),  # v1 has no reach field
    "version_is_str": (lambda m: m.__setitem__("v", "1"), "v"),
    "kind_batch": (lambda m: m.__setitem__("kind", "batch"), "kind"),
    "envelope_extra_field": (lambda m: m.__setitem__("extra", 1), "envelope"),
    "body_missing": (lambda m: m.pop("body"), "body"),
    # body fields
    "missing_peer_id": (lambda m: m["body"].pop("peer_id"), "body.peer_id"),
    "missing_batches": (lambda m: m["body"].pop("batches"), "body.batches"),
    "unknown_field": (body_set("signature", b"x"), "body"),
    "empty_run_id": (body_set("run_id", ""), "body.run_id"),
    "model_too_long": (body_set("model", "m" * (MAX_NAME_CHARS + 1)), "body.model"),
    "adapter_unknown": (body_set("adapter", "qlora"), "body.adapter"),
    "policy_version_is_str": (body_set("policy_version", "7"), "body.policy_version"),
    "policy_version_negative": (body_set("policy_version", -1), "body.policy_version"),
    "published_batches_is_bool": (body_set("published_batches", True), "body.published_batches"),
    "updated_at_is_str": (body_set("updated_at", "now"), "body.updated_at"),
    "updated_at_nan": (body_set("updated_at", float("nan")), "body.updated_at"),
    "batches_is_map": (body_set("batches", {"0": 1}), "body.batches"),
    "too_many_batches": (
        lambda m: m["body"].__setitem__("batches", [
            {**m["body"]["batches"][0], "seq": i} for i in range(MAX_ANNOUNCED_BATCHES + 1)
        ]),
        "body.batches",
    ),
    "duplicate_seq": (lambda m: m["body"]["batches"][1].__setitem__("seq", m["body"]["batches"][0]["seq"]),
                      "body.batches"),
    # descriptors
    "descriptor_not_a_map": (lambda m: m["body"]["batches"].__setitem__(0, [1, 2]), "body.batches[0]"),
    "descriptor_unknown_field": (first_batch_set("url", "http://x"), "body.batches[0]"),
    "descriptor_missing_bytes": (lambda m: m["body"]["batches"][0].pop("bytes"), "body.batches[0].bytes"),
    "sha256_short": (first_batch_set("sha256", b"\x00" * (SHA256_BYTES - 1)), "body.batches[0].sha256"),
    "sha256_long": (first_batch_set("sha256", b"\x00" * (SHA256_BYTES + 1)), "body.batches[0].sha256"),
    "sha256_is_str": (first_batch_set("sha256", "00" * SHA256_BYTES), "body.batches[0].sha256"),
    "seq_is_bool": (first_batch_set("seq", False), "body.batches[0].seq"),
    "seq_is_float": (first_batch_set("seq", 3.0), "body.batches[0].seq"),
    "seq_negative": (first_batch_set("seq", -1), "body.batches[0].seq"),
    "groups_zero": (first_batch_set("groups", 0), "body.batches[0].groups"),
    "tokens_zero": (first_batch_set("tokens", 0), "body.batches[0].tokens"),
    "bytes_over_payload_limit": (first_batch_set("bytes", 1 << 40), "body.batches[0].bytes"),
    "created_at_negative": (first_batch_set("created_at", -1.0), "body.batches[0].created_at"),
    "created_at_infinite": (first_batch_set("created_at", float("inf")), "body.batches[0].created_at"),
    # reach (v2): what a hostile peer may write about how it is reached
    "reach_missing": (lambda m: m["body"].pop("reach"), "body.reach"),
    "reach_not_a_map": (body_set("reach", "relayed"), "body.reach"),
    "reach_unknown_field": (lambda m: m["body"]["reach"].__setitem__("port", 1), "body.reach"),
    "reach_how_unknown": (reach_set("teleported", []), "body.reach.how"),
    "reach_relayed_without_addrs": (reach_set("relayed", []), "body.reach.addrs"),
    "reach_direct_with_addrs": (reach_set("direct", [CIRCUIT]), "body.reach.addrs"),
    "reach_unreachable_with_addrs": (reach_set("unreachable", [CIRCUIT]), "body.reach.addrs"),
    "reach_too_many_addrs": (reach_set("relayed", [CIRCUIT.replace("443", str(i)).replace("31337", str(i))
                                                   for i in range(MAX_RELAY_ADDRS + 1)]), "body.reach.addrs"),
    "reach_addrs_not_a_list": (reach_set("relayed", {CIRCUIT: 1}), "body.reach.addrs"),
    "reach_addr_not_a_string": (reach_set("relayed", [CIRCUIT.encode()]), "body.reach.addrs[0]"),
    "reach_addr_too_long": (reach_set("relayed", ["/dns4/" + "a" * MAX_MULTIADDR_CHARS + CIRCUIT]),
                            "body.reach.addrs[0]"),
    "reach_addr_not_a_circuit": (reach_set("relayed", [f"/ip4/203.0.113.7/tcp/31337/p2p/{RELAY}"]),
                                 "body.reach.addrs[0]"),
    "reach_addr_two_circuits": (reach_set("relayed", [f"{CIRCUIT}/p2p/{RELAY[:-1]}Y/p2p-circuit"]),
                                "body.reach.addrs[0]"),
    "reach_addr_for_another_peer": (reach_set("relayed", [f"{CIRCUIT}/p2p/{RELAY[:-1]}Y"]), "body.reach.addrs[0]"),
    "reach_addr_relay_is_itself": (reach_set("relayed", [f"/ip4/203.0.113.7/tcp/1/p2p/{PEER}/p2p-circuit"]),
                                   "body.reach.addrs[0]"),
    "reach_addr_relay_not_a_peer_id": (reach_set("relayed", ["/ip4/203.0.113.7/tcp/1/p2p/0OIl/p2p-circuit"]),
                                       "body.reach.addrs[0]"),
    "reach_addr_terminal_escape": (reach_set("relayed", ["/ip4/\x1b[2J/tcp/1" + CIRCUIT]), "body.reach.addrs[0]"),
    "reach_addr_newline": (reach_set("relayed", [CIRCUIT + "\n"]), "body.reach.addrs[0]"),
    "reach_addrs_repeated": (reach_set("relayed", [CIRCUIT, CIRCUIT]), "body.reach.addrs"),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_message_names_its_field(name):
    change, field = MALFORMED[name]
    with pytest.raises(DecodeError) as caught:
        decode_announcement(mutated(change))
    assert caught.value.field == field, caught.value


VALID = encode_announcement(announcement())

MALFORMED_BYTES = {
    "truncated": (VALID[: len(VALID) // 2], "payload"),
    "one_byte_short": (VALID[:-1], "payload"),
    "trailing_bytes": (VALID + b"\x00", "payload"),
    "empty": (b"", "payload"),
    "not_msgpack": (b"\xc1" * 10, "payload"),
    "over_the_size_limit": (VALID + b"\x00" * MAX_ANNOUNCEMENT_BYTES, "payload"),
    "a_batch_message": (msgpack.packb({"v": 1, "kind": "batch", "body": {}}), "kind"),
}


@pytest.mark.parametrize("name", list(MALFORMED_BYTES))
def test_malformed_bytes_are_refused(name):
    data, field = MALFORMED_BYTES[name]
    with pytest.raises(DecodeError) as caught:
        decode_announcement(data)
    assert caught.value.field == field, caught.value


def test_top_level_must_be_a_map():
    with pytest.raises(DecodeError) as caught:
        decode_announcement(msgpack.packb([1, "announcement", {}]))
    assert caught.value.field == "envelope"


def test_input_must_be_bytes():
    with pytest.raises(DecodeError) as caught:
        decode_announcement(VALID.decode("latin-1"))
    assert caught.value.field == "payload"


# --- encode refuses what decode would refuse --------------------------------------------------------

UNENCODABLE = {
    "duplicate_seq": (dict(batches=(descriptor(1), descriptor(1))), "body.batches"),
    "too_many_batches": (dict(batches=tuple(descriptor(i) for i in range(MAX_ANNOUNCED_BATCHES + 1))),
                         "body.batches"),
    "sha256_short": (dict(batches=(descriptor(1, sha256=b"\x01" * 31),)), "body.batches[0].sha256"),
    "adapter_unknown": (dict(adapter="qlora"), "body.adapter"),
    "empty_peer_id": (dict(peer_id=""), "body.peer_id"),
    "name_too_long": (dict(tokenizer="t" * (MAX_NAME_CHARS + 1)), "body.tokenizer"),
    "negative_policy_version": (dict(policy_version=-1), "body.policy_version"),
    "updated_at_nan": (dict(updated_at=float("nan")), "body.updated_at"),
    "seq_is_bool": (dict(batches=(descriptor(True),)), "body.batches[0].seq"),
    "tokens_zero": (dict(batches=(descriptor(1, tokens=0),)), "body.batches[0].tokens"),
    "not_packable": (dict(model=object()), "announcement"),
    "int_too_large_to_pack": (dict(published_tokens=1 << 70), "announcement"),
}


@pytest.mark.parametrize("name", list(UNENCODABLE))
def test_encode_refuses_what_decode_would(name):
    changes, field = UNENCODABLE[name]
    with pytest.raises(EncodeError) as caught:
        encode_announcement(announcement(**changes))
    assert caught.value.field == field, caught.value


def test_encode_refuses_an_announcement_over_the_size_limit():
    """Names at their limits fit; the byte limit is the last line of defence, not reachable by names."""
    big = announcement(MAX_ANNOUNCED_BATCHES, model="m" * MAX_NAME_CHARS)
    assert len(encode_announcement(big)) <= MAX_ANNOUNCEMENT_BYTES
    with pytest.raises(EncodeError):
        encode_announcement(dataclasses.replace(big, model="m" * (MAX_ANNOUNCEMENT_BYTES + 1)))
