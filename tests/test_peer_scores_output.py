"""Where a node's peer scores show: the step record (``metrics.jsonl``), TensorBoard tags, the terminal,
``DIR/peers.json`` and the members table of ``ftis-node status --node DIR``.

Run: python -m pytest tests/test_peer_scores_output.py -q
"""

import dataclasses
import math
import re
from dataclasses import replace

import pytest
from helpers.metrics_fakes import AFTER, BEFORE, PEER_A, PEER_B, report
from typer.testing import CliRunner

from ftis.node.cli import app
from ftis.node.config import MetricsConfig
from ftis.node.records.display import summary_line
from ftis.node.records.metrics import RunMetrics, report_record, tensorboard_scalars
from ftis.node.swarm.peers.peer_view import PEER_VIEW_FILE, PeerView, PeerViewError, read_peer_view, write_peer_view
from ftis.node.swarm.peers.reputation import PeerScore
from ftis.node.swarm.status import members_table
from ftis.node.swarm.transport import Member

NOW = 1_700_000_000.0
SCORES = {
    PEER_A: PeerScore(score=0.95, good=18.0, bad=0.5, muted_until=None, mutes=0),
    PEER_B: PeerScore(score=0.2, good=1.0, bad=9.0, muted_until=NOW + 240, mutes=2),
}


def scored_report(round_: int = 4):
    return replace(report(round_, transport=AFTER), scores=SCORES)


def test_the_record_sums_up_the_peers_scores_and_mutes():
    record = report_record(scored_report(), previous=BEFORE)
    assert (record["peers_scored"], record["peers_muted"]) == (2, 1)
    assert record["peer_score_min"] == 0.2 and record["peer_score_mean"] == pytest.approx(0.575)
    scalars = tensorboard_scalars(record)
    assert scalars["peers/score_min"] == 0.2 and scalars["peers/score_mean"] == pytest.approx(0.575)
    assert scalars["peers/muted"] == 1 and scalars["peers/scored"] == 2
    quiet = report_record(report(0))  # no peer scored yet
    assert (quiet["peers_scored"], quiet["peers_muted"]) == (0, 0) and math.isnan(quiet["peer_score_min"])
    assert tensorboard_scalars(quiet)["peers/muted"] == 0 and "peers/score_min" not in tensorboard_scalars(quiet)


def test_the_summary_line_counts_muted_peers_only_when_there_are_some():
    assert summary_line(report_record(scored_report(), previous=BEFORE)).endswith("muted 1")
    assert "muted" not in summary_line(report_record(report(transport=AFTER), previous=BEFORE))


def test_run_metrics_replaces_the_peer_view_every_step(tmp_path):
    metrics = RunMetrics(tmp_path, MetricsConfig(display="lines", tensorboard=False), lambda line: None)
    try:
        metrics.record(report(3, transport=BEFORE))
        metrics.flush()  # written on the writer's thread
        first = read_peer_view(tmp_path)
        metrics.record(scored_report(4))
    finally:
        metrics.close()
    assert first.round == 3 and first.scores == {}
    assert first.rejections == {PEER_A: {"stale": 2}, PEER_B: {"quota": 1}}  # refused, never judged
    view = read_peer_view(tmp_path)
    assert view.round == 4 and view.scores == SCORES
    assert view.rejections[PEER_B] == {"hash": 1, "quota": 1, "stale": 2}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging file left


def test_a_missing_or_damaged_peer_view_is_a_clear_error(tmp_path):
    with pytest.raises(PeerViewError, match="is a node running with --out"):
        read_peer_view(tmp_path)
    (tmp_path / PEER_VIEW_FILE).write_text('{"time": 1, "round": 0, "peers": {"x": {"score": 0.5}}}')
    with pytest.raises(PeerViewError, match="not a peer view"):
        read_peer_view(tmp_path)


def member(peer_id: str) -> Member:
    return Member(peer_id, "tiny-small", "full", "fp", 7, 8, 900, NOW - 2)


def test_the_members_table_adds_the_nodes_scores_and_mutes(tmp_path):
    members = [member(PEER_A), member(PEER_B), member("12D3KooWSelf")]
    plain = members_table(members, "run-x", now=NOW)
    assert "score" not in plain and "muted" not in plain  # without a view: unchanged
    write_peer_view(tmp_path, PeerView(NOW - 3, 12, SCORES, {PEER_B: {"hash_mismatch": 5}},
                                       use={PEER_A: "sequence", PEER_B: "token"}))
    table = members_table(members, "run-x", now=NOW, view=read_peer_view(tmp_path))
    lines = table.splitlines()
    assert lines[1] == "scores: the node's view of round 12, 3 s ago"
    assert lines[2] == "the node: 0 failed announcements and 0 failed reads of the DHT since it started"
    assert re.split(r"\s{2,}", lines[3]) == ["peer id", "model", "adapter", "policy", "batches", "tokens", "last seen",
                                             "reached", "score", "muted", "used"]
    rows = {line.split()[0]: re.split(r"\s{2,}", line) for line in lines[4:]}
    assert rows[PEER_A][-3:] == ["0.95", "no", "per sequence"]
    assert rows[PEER_B][-3:] == ["0.20", "240 s more", "per token"]
    assert rows["12D3KooWSelf"][-3:] == ["-", "-", "-"]  # the node itself, or a member it has no record of
    assert rows[PEER_A][-4] == "?"  # it did not say how it is reached


def test_the_members_table_says_how_the_node_trains_on_each_member(tmp_path):
    peers = {"12D3KooWToken": "token", "12D3KooWSeq": "sequence", "12D3KooWNone": "none"}
    members = [member(peer) for peer in [*peers, "12D3KooWSkipped"]]
    view = PeerView(NOW - 3, 12, {}, {"12D3KooWSkipped": {"tokenizer": 3}}, use=peers)
    write_peer_view(tmp_path, view)
    table = members_table(members, "run-x", now=NOW, view=read_peer_view(tmp_path))
    used = {line.split()[0]: re.split(r"\s{2,}", line)[-1] for line in table.splitlines()[4:]}
    assert used == {"12D3KooWToken": "per token", "12D3KooWSeq": "per sequence", "12D3KooWNone": "no",
                    "12D3KooWSkipped": "no: other tokenizer"}


def test_the_members_table_says_how_each_member_is_reached():
    relay, other = "12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo", "QmRelayTwo" + "x" * 36
    members = [dataclasses.replace(member(f"peer-{how}"), reach=how)
               for how in ("direct", "private", "unreachable", "unknown")]
    members += [dataclasses.replace(member("peer-relayed"), reach="relayed", relays=(relay,)),
                dataclasses.replace(member("peer-relayed-twice"), reach="relayed", relays=(relay, other))]
    rows = {line.split()[0]: line for line in members_table(members, "run-x", now=NOW).splitlines()[2:]}
    assert rows["peer-direct"].endswith(" direct") and rows["peer-unreachable"].endswith(" unreachable")
    assert rows["peer-unknown"].endswith(" ?") and rows["peer-private"].endswith(" private")
    assert rows["peer-relayed"].endswith(" relay 12D3KooWQYhTNQdm…")
    assert rows["peer-relayed-twice"].endswith(" relay 12D3KooWQYhTNQdm… +1")


def test_status_with_a_folder_without_a_view_exits_before_joining(tmp_path):
    peer = "/ip4/127.0.0.1/tcp/1/p2p/QmTkE4a7nvYSc1yUXpT54EuJ9HioRfWSseK7pedhojN5RW"
    result = CliRunner().invoke(app, ["status", "--peer", peer, "--node", str(tmp_path)])
    assert result.exit_code == 1
    assert "peers.json does not exist" in result.output
