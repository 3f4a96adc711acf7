"""The protocol's fixed-bytes fixtures of every version still decode, to exactly what they decoded to when written.

Run: python -m pytest tests/test_protocol_fixtures.py -q

``tests/fixtures/protocol/v1/<name>.msgpack`` holds bytes a v1 encoder wrote; ``<name>.json`` holds
their decoded content, every field, log-probs as exact float values. The format is append-only,
so every later version of the decoder must read these bytes the same way: a failure here
means a change broke v1, not that the fixture needs regenerating. This test never writes them
(``tests/fixtures/protocol/make_v1.py`` does, once). ``v1/invalid/*.bin`` must stay refused, with
the field ``v1/invalid/index.json`` names. ``v2/small.msgpack`` is v1's small batch as a v2 encoder writes it
(a v2 batch has v1's body). ``v3/`` holds what ``encode`` writes now (``make_v3.py``): a batch with texts, whose
JSON adds each completion's ``text``, and one without; building a batch from their JSON must encode to their
bytes exactly, and v1's and v2's batches to their body under ``"v": 3``.
"""

import json
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest

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
from ftis.protocol.limits import PROTOCOL_VERSION

V1 = Path(__file__).parent / "fixtures" / "protocol" / "v1"
V2 = V1.parent / "v2"
V3 = V1.parent / "v3"
VALID = sorted(V1.glob("*.msgpack")) + sorted(V2.glob("*.msgpack")) + sorted(V3.glob("*.msgpack"))
INVALID = json.loads((V1 / "invalid" / "index.json").read_text())


def as_plain(batch: RolloutBatch) -> dict[str, Any]:
    """The batch as the fixtures' JSON spells it (written here again, not imported from the generator,
    so that a change to the generator cannot change what this test expects)."""

    def fields(obj: Any, *names: str) -> dict[str, Any]:
        return {name: getattr(obj, name) for name in names}

    return {
        **fields(batch, "run_id", "peer_id"),
        "seq": batch.round,  # the JSON names the round by its wire key
        "created_at": batch.created_at,
        "policy": fields(batch.policy, "model", "revision", "adapter", "policy_version"),
        "tokenizer": fields(batch.tokenizer, "fingerprint", "vocab_size"),
        "sampling": fields(batch.sampling, "temperature", "top_p", "top_k", "max_new_tokens"),
        "groups": [
            {
                "group_id": group.group_id,
                "task": fields(group.task, "dataset", "split", "index", "answer"),
                "prompt_ids": group.prompt_ids.tolist(),
                "completions": [
                    {
                        "token_ids": c.token_ids.tolist(),
                        "sampler_logprobs": c.sampler_logprobs.tolist(),
                        **fields(c, "reward", "finish_reason"),
                        **({"text": c.text} if c.text is not None else {}),
                    }
                    for c in group.completions
                ],
            }
            for group in batch.groups
        ],
    }


def from_plain(plain: dict[str, Any]) -> RolloutBatch:
    """The batch a fixture's JSON describes (log-probs as float64: their exact decoded values)."""
    groups = tuple(
        Group(group["group_id"], TaskRef(**group["task"]), np.array(group["prompt_ids"], np.int64), tuple(
            Completion(np.array(c["token_ids"], np.int64), np.array(c["sampler_logprobs"], np.float64), c["reward"],
                       c["finish_reason"], c.get("text"))
            for c in group["completions"]))
        for group in plain["groups"]
    )  # fmt: skip
    return RolloutBatch(plain["run_id"], plain["peer_id"], plain["seq"], plain["created_at"],
                        PolicyInfo(**plain["policy"]), TokenizerInfo(**plain["tokenizer"]),
                        SamplingSettings(**plain["sampling"]), groups)


def test_the_fixtures_are_there():
    assert {p.stem for p in V1.glob("*.msgpack")} >= {"small", "typical", "edge", "foreign"}
    assert {p.stem for p in V2.glob("*.msgpack")} == {"small"}
    assert {p.stem for p in V3.glob("*.msgpack")} >= {"small", "no_texts"}
    documented = [*V1.glob("*.json"), *V2.glob("*.json"), *V3.glob("*.json")]
    assert {p.with_suffix("") for p in VALID} == {p.with_suffix("") for p in documented}, "a .msgpack lacks its .json"
    assert {p.name for p in (V1 / "invalid").glob("*.bin")} == set(INVALID), "each .bin needs its index entry"


@pytest.mark.parametrize("path", VALID, ids=[f"{p.parent.name}-{p.stem}" for p in VALID])
def test_fixture_decodes_to_its_json(path: Path):
    data = path.read_bytes()
    assert msgpack.unpackb(data)["v"] == int(path.parent.name[1:])
    batch = decode(data)
    expected = json.loads(path.with_suffix(".json").read_text())
    assert as_plain(batch) == expected  # floats compare exactly: JSON keeps every float64 digit
    for group, want in zip(batch.groups, expected["groups"], strict=True):
        assert group.prompt_ids.dtype == np.int64
        for c, want_c in zip(group.completions, want["completions"], strict=True):
            assert c.token_ids.dtype == np.int64 and c.sampler_logprobs.dtype == np.float32
            np.testing.assert_array_equal(c.sampler_logprobs, np.array(want_c["sampler_logprobs"], np.float32))


@pytest.mark.parametrize("path", VALID, ids=[f"{p.parent.name}-{p.stem}" for p in VALID])
def test_fixture_survives_a_re_encode(path: Path):
    batch = decode(path.read_bytes())
    assert decode(encode(batch)) == batch


def test_the_v3_fixture_carries_texts_of_every_width():
    texts = [c.text for group in decode((V3 / "small.msgpack").read_bytes()).groups for c in group.completions]
    assert "" in texts and any("é" in t for t in texts) and any("漢字" in t for t in texts)
    assert any(any(ord(ch) > 0xFFFF for ch in t) for t in texts)  # a 4-byte character (an emoji)
    assert "texts" not in msgpack.unpackb((V3 / "no_texts.msgpack").read_bytes())["body"]
    assert all(c.text is None for group in decode((V3 / "no_texts.msgpack").read_bytes()).groups
               for c in group.completions)


# "foreign" was written by another implementation (other key order, another zstd level): not what encode writes.
ENCODED = [p for p in VALID if p.stem != "foreign"]


@pytest.mark.parametrize("path", ENCODED, ids=[f"{p.parent.name}-{p.stem}" for p in ENCODED])
def test_the_fixture_json_encodes_to_its_bytes(path: Path):
    data = encode(from_plain(json.loads(path.with_suffix(".json").read_text())))
    message = msgpack.unpackb(path.read_bytes(), raw=False)
    assert data == msgpack.packb({**message, "v": PROTOCOL_VERSION}, use_bin_type=True)


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_fixture_is_refused(name: str):
    with pytest.raises(DecodeError) as info:
        decode((V1 / "invalid" / name).read_bytes())
    assert info.value.field == INVALID[name]["field"]
