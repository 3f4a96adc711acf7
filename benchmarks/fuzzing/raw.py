"""Hostile batches the protocol refuses, or that lie about themselves: bytes edited after encoding, and the table
of every maker (``MAKERS``) the node fuzzer draws from.

- ``deep_envelope``: nested empty arrays (1 byte each on the wire, a Python list each once unpacked), as the whole
  message or in place of a field, up to 100,000 deep;
- ``wide_envelope``: up to 10,000,000 empty arrays, empty maps or nils in one array, a map of a million keys, an
  array header claiming 2**32 - 1 items that are not there;
- ``bad_texts``: a v3 text column that is not UTF-8 (a stray byte, an overlong form, a lone surrogate, a code point
  past U+10FFFF, a character cut between two completions) or whose frame disagrees with its lengths;
- ``mutated``: the protocol fuzzer's mutations (``inputs.mutate``) of honest batches of this node's run;
- ``lying_descriptor``: an honest batch whose announcement lies about its counts, date, size or hash, or another
  peer's batch served as the peer's own;
- ``bomb``: a batch within every limit the decoder checks before inflating that inflates to hundreds of MB: of
  text in another tokenizer, of text and ids in the node's own, of ids alone (8,388,000 tokens). Their frames are
  made once per process (compressed a chunk at a time, never held inflated) and reused.
"""

import random

import msgpack
import numpy as np
import zstandard

from benchmarks.fuzzing import hostile
from benchmarks.fuzzing.frames import repeated_frame
from benchmarks.fuzzing.inputs import MUTATIONS, mutate, pack, unpack, zstd
from benchmarks.fuzzing.kit import OTHER_FINGERPRINT, Kit, batch, case, group_id, text_group, varied
from benchmarks.fuzzing.peers import Case
from ftis.protocol.limits import MAX_BATCH_TOKENS, MAX_GROUP_SIZE, MAX_TEXT_BYTES_PER_TOKEN, MAX_TEXT_SLACK_BYTES

_HOLE = "\x00fuzz: raw msgpack goes here\x00"  # a field's placeholder, replaced by raw bytes after packing


def _with_raw(payload: bytes, path: tuple[str, ...], raw: bytes) -> bytes:
    """``payload`` with the value at ``path`` (keys from the envelope down; () for the whole message) replaced by
    the msgpack bytes ``raw``, which ``msgpack.packb`` could not make (it refuses to nest past 512)."""
    if not path:
        return raw
    message = unpack(payload)
    container = message
    for key in path[:-1]:
        container = container[key]
    container[path[-1]] = _HOLE
    packed = pack(message)
    hole = msgpack.packb(_HOLE)
    assert packed.count(hole) == 1
    return packed.replace(hole, raw)


PLACES = {"message": (), "body": ("body",), "group_id": ("body", "groups", "group_id"), "policy": ("body", "policy"),
          "sampling": ("body", "sampling")}


def deep_envelope(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    base = hostile.honest(kit, rng, peer, round_)
    depth = rng.choice([5, 64, 1000, 100_000])
    place = rng.choice(sorted(PLACES))
    raw = b"\x91" * (depth - 1) + b"\x90"  # [[[...[]...]]]
    return _raw_case(f"deep_envelope/{depth}/{place}", base, _with_raw(base.payload, PLACES[place], raw))


def wide_envelope(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    base = hostile.honest(kit, rng, peer, round_)
    count = rng.choice([1000, 100_000, 1_000_000, 10_000_000] if rng.random() < 0.1 else [1000, 100_000, 1_000_000])
    what = rng.choice(["arrays", "maps", "nils", "keys", "claimed"])
    if what == "keys":
        count = min(count, 1_000_000)
        raw = b"\xdf" + count.to_bytes(4, "big") + b"".join(msgpack.packb(f"k{k}") + b"\xc0" for k in range(count))
    elif what == "claimed":  # an array of 2**32 - 1 items, of which ``count`` are there
        raw = b"\xdd\xff\xff\xff\xff" + b"\x90" * count
    else:
        raw = b"\xdd" + count.to_bytes(4, "big") + {"arrays": b"\x90", "maps": b"\x80", "nils": b"\xc0"}[what] * count
    place = rng.choice(sorted(PLACES))
    return _raw_case(f"wide_envelope/{count}/{what}/{place}", base, _with_raw(base.payload, PLACES[place], raw))


INVALID_UTF8 = {"stray_byte": b"\xff", "overlong": b"\xc0\xaf", "surrogate": b"\xed\xa0\x80",
                "past_unicode": b"\xf4\x90\x80\x80", "continuation": b"\x80"}


def bad_texts(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    problem = kit.problem(rng)
    texts = [t + " 漢" for t in varied(problem, 4)]
    base = case("bad_texts", batch(kit, peer, round_, [text_group(group_id(peer, round_, 0), problem, texts)],
                                   fingerprint=OTHER_FINGERPRINT))
    message = unpack(base.payload)
    column = message["body"]["texts"]
    raw = bytearray(zstandard.ZstdDecompressor().decompress(column["data"]))
    lengths = np.frombuffer(column["length"], "<u4").astype(np.int64)
    variant = rng.choice([*sorted(INVALID_UTF8), "cut_character", "lengths_short", "frame_longer"])
    if variant in INVALID_UTF8:
        bad = INVALID_UTF8[variant]
        at = rng.randrange(len(raw) - len(bad))
        raw[at : at + len(bad)] = bad
    elif variant == "cut_character":  # the first text ends inside "漢", the second starts with its last byte
        lengths[0] -= 1
        lengths[1] += 1
    elif variant == "lengths_short":
        lengths[-1] -= 1
    else:
        raw += b"more"
    column["length"] = lengths.astype("<u4").tobytes()
    column["data"] = zstd(bytes(raw))
    return _raw_case(f"bad_texts/{variant}", base, pack(message))


def mutated(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    base = rng.choice([hostile.honest, hostile.other_tokenizer])(kit, rng, peer, round_)
    kind, data = mutate(rng, [base.payload], MUTATIONS)
    return _raw_case(f"mutated/{kind}", base, data)


def lying_descriptor(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    field = rng.choice(["groups", "tokens", "created_at", "policy_version", "bytes_less", "bytes_more", "sha256",
                        "another_peers"])
    base = hostile.honest(kit, rng, f"{peer[:200]}-replayed" if field == "another_peers" else peer, round_)
    change = {"groups": {"groups": 2}, "tokens": {"tokens": 10**6}, "created_at": {"created_at": base.created_at - 1},
              "policy_version": {"policy_version": 7}, "bytes_less": {"bytes": len(base.payload) - 1},
              "bytes_more": {"bytes": len(base.payload) + 1}, "sha256": {"sha256": rng.randbytes(32)},
              "another_peers": {}}[field]  # a batch of another peer's, served as its own
    return Case(f"lying_descriptor/{field}", peer, round_, base.payload, base.tokenizer, base.created_at, change)


BOMB_COMPLETIONS = MAX_GROUP_SIZE
BOMB_TOKENS = (MAX_BATCH_TOKENS - 1) // BOMB_COMPLETIONS  # 16,383: one prompt token more and the batch is full


def bomb(kit: Kit, rng: random.Random, peer: str, round_: int) -> Case:
    """One group of 512 completions of 16,383 tokens, every id 0 and every log-prob 0, with or without a text of
    the protocol's longest for each (64 bytes a token + 256): ~67 MB of columns and ~537 MB of text, inflated."""
    variant = rng.choice(["texts_other", "texts_own", "ids_only"])
    fingerprint = OTHER_FINGERPRINT if variant == "texts_other" else kit.fingerprint
    problem = kit.problem(rng)
    group = text_group(group_id(peer, round_, 0), problem, ["a"])
    template = batch(kit, peer, round_, [group], fingerprint=fingerprint, max_new_tokens=BOMB_TOKENS)
    base = case(f"bomb/{variant}", template)
    message = unpack(base.payload)
    body = message["body"]
    body["groups"]["size"] = np.array([BOMB_COMPLETIONS], "<u4").tobytes()
    body["completions"] = {"length": np.full(BOMB_COMPLETIONS, BOMB_TOKENS, "<u4").tobytes(),
                           "reward": np.zeros(BOMB_COMPLETIONS, "<f8").tobytes(),
                           "finish_reason": np.full(BOMB_COMPLETIONS, 1, "u1").tobytes()}
    width = body["tokens"]["id_width"]
    prompt = int(np.frombuffer(body["groups"]["prompt_length"], "<u4")[0])
    tokens = BOMB_COMPLETIONS * BOMB_TOKENS
    body["tokens"]["logprob_width"] = 1
    body["tokens"]["data"] = repeated_frame(b"\0", (prompt + tokens) * width + tokens)
    if variant == "ids_only":
        del body["texts"]
    else:
        text_bytes = MAX_TEXT_BYTES_PER_TOKEN * BOMB_TOKENS + MAX_TEXT_SLACK_BYTES
        body["texts"] = {"length": np.full(BOMB_COMPLETIONS, text_bytes, "<u4").tobytes(),
                         "data": repeated_frame(b"a", BOMB_COMPLETIONS * text_bytes)}
    return _raw_case(f"bomb/{variant}", base, pack(message))


def _raw_case(kind: str, base: Case, payload: bytes) -> Case:
    return Case(kind, base.peer_id, base.round, payload, base.tokenizer, base.created_at)


# Every maker, and how often it is drawn (relative weights). The costly ones to build are rare; ``bomb`` rarest.
MAKERS: dict[str, tuple[hostile.Maker, float]] = {
    "honest": (hostile.honest, 3),
    "huge_number_text": (hostile.huge_number_text, 6),
    "huge_number_gold": (hostile.huge_number_gold, 4),
    "long_completions": (hostile.long_completions, 3),
    "long_prompt": (hostile.long_prompt, 3),
    "odd_texts": (hostile.odd_texts, 8),
    "vocab_edge": (hostile.vocab_edge, 5),
    "sampling_edges": (hostile.sampling_edges, 5),
    "small_groups": (hostile.small_groups, 4),
    "wrong_refs": (hostile.wrong_refs, 5),
    "other_tokenizer": (hostile.other_tokenizer, 6),
    "rounds_ahead": (hostile.rounds_ahead, 3),
    "dated": (hostile.dated, 3),
    "horizontal_ids": (hostile.horizontal_ids, 2),
    "math_answers": (hostile.math_answers, 2),
    "deep_envelope": (deep_envelope, 4),
    "wide_envelope": (wide_envelope, 2),
    "bad_texts": (bad_texts, 5),
    "mutated": (mutated, 10),
    "lying_descriptor": (lying_descriptor, 4),
    "bomb": (bomb, 0.05),
}
