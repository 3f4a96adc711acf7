"""Announcements written by each protocol version still decode, to exactly what they decoded to when written.

Run: python -m pytest tests/test_announcement_fixtures.py -q

``tests/fixtures/protocol/announcements/v<N>/<name>.msgpack`` holds bytes a v<N> encoder wrote, ``<name>.json``
their content (written once by ``make_announcements.py``, never here). A v1 announcement says nothing of its
reach, and decodes as reach unknown; v2 adds ``reach``; v3 announcements are v2's under ``"v": 3``. A failure
means a change broke an older version.
"""

import json
from pathlib import Path
from typing import Any

import msgpack
import pytest

from ftis.protocol.announcement import Announcement, decode_announcement, encode_announcement
from ftis.protocol.limits import PROTOCOL_VERSION

HERE = Path(__file__).parent / "fixtures" / "protocol" / "announcements"
FIXTURES = sorted(HERE.glob("v*/*.msgpack"))


def as_plain(a: Announcement) -> dict[str, Any]:
    """The announcement as the fixtures' JSON spells it (written again here, not imported from the generator)."""
    plain: dict[str, Any] = {name: getattr(a, name) for name in (
        "run_id", "peer_id", "model", "adapter", "tokenizer", "policy_version", "published_batches",
        "published_tokens", "updated_at")}
    plain["batches"] = [{"seq": d.round, "groups": d.groups, "tokens": d.tokens, "bytes": d.bytes,
                         "sha256": d.sha256.hex(), "policy_version": d.policy_version, "created_at": d.created_at}
                        for d in a.batches]
    plain["reach"] = {"how": a.reach.how, "addrs": list(a.reach.addrs)}
    return plain


def test_each_version_has_its_fixtures():
    names = {(p.parent.name, p.stem) for p in FIXTURES}
    assert ("v1", "plain") in names
    assert {("v2", how) for how in ("unknown", "direct", "relayed", "private", "unreachable")} <= names
    assert {("v3", "direct"), ("v3", "relayed")} <= names
    assert names == {(p.parent.name, p.stem) for p in HERE.glob("v*/*.json")}, "each .msgpack needs its .json"


@pytest.mark.parametrize("path", FIXTURES, ids=[f"{p.parent.name}-{p.stem}" for p in FIXTURES])
def test_fixture_decodes_to_its_json(path: Path):
    data = path.read_bytes()
    assert msgpack.unpackb(data)["v"] == int(path.parent.name[1:])
    assert as_plain(decode_announcement(data)) == json.loads(path.with_suffix(".json").read_text())


@pytest.mark.parametrize("path", FIXTURES, ids=[f"{p.parent.name}-{p.stem}" for p in FIXTURES])
def test_fixture_re_encodes_as_the_current_version(path: Path):
    announcement = decode_announcement(path.read_bytes())
    again = encode_announcement(announcement)
    assert msgpack.unpackb(again)["v"] == PROTOCOL_VERSION
    assert decode_announcement(again) == announcement
    if path.parent.name != "v1":  # the encoder still writes these bytes (v2's under "v": 2)
        message = msgpack.unpackb(path.read_bytes(), raw=False)
        assert again == msgpack.packb({**message, "v": PROTOCOL_VERSION}, use_bin_type=True)


def test_the_relayed_fixture_names_its_relay():
    relayed = decode_announcement((HERE / "v2" / "relayed.msgpack").read_bytes())
    assert relayed.reach.how == "relayed" and len(relayed.reach.addrs) == 2
    assert relayed.reach.relays == ("12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo",)
