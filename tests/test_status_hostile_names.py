"""A member that announces a model name made of terminal escapes, a bidi override and a newline with a fake row:
``ftis-node status``'s members table, the node's terminal display and the dashboard's members show it as visible
characters, never as control characters, and one member stays one row.

Run: python -m pytest tests/test_status_hostile_names.py -q   (under a second)
"""

import io
import json

from helpers.metrics_fakes import AFTER, BEFORE, PEER_A, report
from rich.console import Console

from ftis.node.records.display import TableDisplay, summary_line
from ftis.node.records.metrics import report_record
from ftis.node.swarm.dht.directory import MembersReading
from ftis.node.swarm.status import members_table
from ftis.node.swarm.transport import member_of
from ftis.protocol.announcement import Announcement

CLEAR_AND_TITLE = "\x1b[2J\x1b]0;pwned\x07"
FAKE_ROW = "\n12D3KooWFakeFakeFakeFakeFakeFakeFakeFakeFakeFakeFake  tiny-small  full  99  99  99  0 s ago  direct"
HOSTILE_MODEL = CLEAR_AND_TITLE + "tiny\u202etxt.exe\u200b\x9b31m" + FAKE_ROW
HOSTILE_PEER = "12D3KooWHostile\x1b[2J\u2066Hostile\u2069\x00\r"
NOW = 1_700_000_000.0


def hostile_member():
    """A member as the directory builds it from the hostile peer's announcement."""
    return member_of(Announcement(run_id="run-x", peer_id=HOSTILE_PEER, model=HOSTILE_MODEL, adapter="full",
                                  tokenizer="sha256:\x1b[31m" + "0" * 56, policy_version=3, published_batches=4,
                                  published_tokens=500, updated_at=NOW - 2, batches=()))


def control_characters(text: str) -> list[str]:
    """The characters of ``text`` that a terminal or a page would not show as themselves (newlines aside)."""
    return sorted({char for char in text if char != "\n" and not char.isprintable()})


def test_the_members_table_shows_a_hostile_members_strings_as_visible_characters():
    table = members_table([hostile_member()], "run-x", now=NOW)
    assert control_characters(table) == []
    lines = table.splitlines()
    assert len(lines) == 3  # the run's line, the header, one row: the newline made no row of its own
    assert "\\x1b[2J\\x1b]0;pwned\\x07" in lines[2] and "\\u202e" in lines[2]


def test_the_terminal_display_shows_a_hostile_peer_id_as_visible_characters():
    record = report_record(report(transport=AFTER), previous=BEFORE)
    record = record | {"peer_groups_by_peer": {HOSTILE_PEER: 2, PEER_A: 1},
                       "train_trained": False, "train_refused": True, "train_nonfinite_peers": [HOSTILE_PEER]}
    line = summary_line(record)
    assert control_characters(line) == [] and "12D3KooWHostile\\x1b[2J" in line
    out = io.StringIO()
    display = TableDisplay(Console(file=out, force_terminal=True, width=200, color_system=None), rows=4)
    display.show(record)
    display.close()
    drawn = out.getvalue()  # rich's own escapes (cursor moves) included
    for hostile in ("\x1b[2J", "\u2066", "\u2069", "\x00"):
        assert hostile not in drawn, repr(hostile)
    assert "\\u2066Hostile\\u2069\\x00\\r" in drawn  # the peer's row: its id's end, visible


def test_the_dashboard_hands_the_page_a_hostile_members_strings_printable(monkeypatch):
    from ftis.node.dashboard import members as members_module
    from ftis.node.dashboard.members import MembersWatch

    monkeypatch.setattr(members_module, "read_members",
                        lambda *_args, **_kwargs: MembersReading([hostile_member()], 4, 4))
    watch = MembersWatch(dht=None, run_id="run-x", shards=4, refresh_s=1.0)
    watch.read_once()
    (member,) = watch.state()["members"]
    for key in ("peer_id", "model", "tokenizer"):
        assert control_characters(member[key]) == [], key
    assert "pwned" in member["model"] and len(member["model"]) <= 256
    json.dumps(member)
