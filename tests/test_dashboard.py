"""The dashboard without a browser: the bounded series and the incremental reader, a node folder the node's own
writers made, the server's endpoints and headers over real HTTP on 127.0.0.1, and the refusal of a public address.

Run: python -m pytest tests/test_dashboard.py -q   (a few seconds; the browser's view: test_dashboard_browser.py)
"""

import itertools
import json
import re
import select
import socket
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers.metrics_fakes import PEER_A, PEER_B, write_node_folder
from typer.testing import CliRunner

from ftis.node.cli import app
from ftis.node.dashboard import series as series_module
from ftis.node.dashboard.charts import CHARTS, layout
from ftis.node.dashboard.members import MembersWatch
from ftis.node.dashboard.nodes import NodeWatch
from ftis.node.dashboard.run import OpenDashboard, node_names
from ftis.node.dashboard.series import BoundedSeries, MetricsTail
from ftis.node.dashboard.server import Content, DashboardError, DashboardServer, check_bind, make_server
from ftis.node.figures import declared
from ftis.node.records.round_report import RoundReport
from ftis.node.swarm.dht.directory import MembersReading
from ftis.node.swarm.transport import Member
from ftis.node.trainer.step_figures import FIGURES

STATIC = Path(__file__).resolve().parent.parent / "node" / "dashboard" / "static"
HOSTILE = "<img src=x onerror=alert(1)>"

# --- the series and the reader ----------------------------------------------------------------------------


def test_a_series_keeps_at_most_its_limit_spread_evenly_with_the_first_and_the_latest_point():
    series = BoundedSeries(limit=50)
    for x in range(100_000):
        series.add(x, 2.0 * x)
        assert len(series) <= 50
    points = series.points()
    assert points[0] == (0, 0.0) and points[-1] == (99_999, 199_998.0)
    kept = [x for x, _ in points[:-1]]
    steps = {b - a for a, b in itertools.pairwise(kept)}
    assert steps == {series.stride}  # evenly spread: every stride-th point offered
    assert len(points) >= 25  # thinned by halves: never below half the limit


def test_a_point_of_the_same_round_replaces_the_one_before():
    series = BoundedSeries(limit=10)
    series.add(0, 0.5)  # an evaluation record of round 0...
    series.add(0, 0.5)  # ...then the step record of round 0, with the same accuracy
    series.add(1, 0.25)
    series.add(1, 0.75)
    assert series.points() == [(0, 0.5), (1, 0.75)]


def test_the_reader_parses_only_what_was_appended_and_waits_for_a_line_to_end(tmp_path, monkeypatch):
    monkeypatch.setattr(series_module, "CHUNK_BYTES", 7)  # lines span chunks
    path = tmp_path / "metrics.jsonl"
    tail = MetricsTail(path)
    assert list(tail.read_new()) == []  # no file yet
    path.write_text('{"round": 0}\n{"round": 1}\n{"rou')
    assert list(tail.read_new()) == [{"round": 0}, {"round": 1}]
    parsed, loads = [], json.loads
    monkeypatch.setattr(series_module.json, "loads", lambda line: parsed.append(line) or loads(line))
    with path.open("a") as handle:
        handle.write('nd": 2}\n')
    assert list(tail.read_new()) == [{"round": 2}]
    assert parsed == [b'{"round": 2}']  # the earlier lines were not read again
    assert tail.offset == path.stat().st_size
    assert list(tail.read_new()) == []


def test_a_long_file_is_read_one_chunk_at_a_time(tmp_path, monkeypatch):
    monkeypatch.setattr(series_module, "CHUNK_BYTES", 64)
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(f'{{"round": {r}}}\n' for r in range(1000)))
    tail = MetricsTail(path)
    records = tail.read_new()
    assert next(records) == {"round": 0}
    assert tail.offset == 64  # one chunk read so far, not the file
    assert [record["round"] for record in records] == list(range(1, 1000))


def test_the_reader_skips_damaged_lines_and_starts_over_on_a_file_that_shrank(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"round": 0}\nnot json\n[1, 2]\n{"round": 1}\n')
    tail = MetricsTail(path)
    assert list(tail.read_new()) == [{"round": 0}, {"round": 1}]
    assert tail.damaged == 2
    path.write_text('{"round": 7}\n')  # a new run in the same folder
    assert list(tail.read_new()) == [{"round": 7}]
    assert tail.restarts == 1


def test_a_node_folder_becomes_bounded_series_latest_figures_and_peer_scores(tmp_path):
    folder = write_node_folder(tmp_path / "small", rounds=60)
    watch = NodeWatch(folder, "small", points=10)
    state = watch.state()
    assert state["records"] == 60 + 12 and state["damaged_lines"] == 0
    own = state["series"]["own_reward"]
    assert len(own) <= 10 and own[0][0] == 0 and own[-1][0] == 59
    evaluations = state["series"]["eval_accuracy"]  # 12, each in its evaluation's and its step's record
    assert len(evaluations) <= 10 and evaluations[0][0] == 0 and evaluations[-1][0] == 55
    assert len(state["series"]["bytes_received"]) <= 10
    assert state["latest"]["round"] == 59 and state["latest"]["policy_version"] == 60
    assert state["latest"]["eval_round"] == 55
    peers = {row["peer_id"]: row for row in state["peers"]["peers"]}
    assert peers[PEER_A]["muted_for_s"] is None and peers[PEER_A]["score"] == 0.9
    assert 590 < peers[PEER_B]["muted_for_s"] <= 600 and peers[PEER_B]["rejections"] == {"hash": 3}
    write_node_folder(tmp_path / "more", rounds=3)  # the same node goes on: only the new lines are read
    with (folder / "metrics.jsonl").open("a") as handle:
        handle.write((tmp_path / "more" / "metrics.jsonl").read_text())
    assert watch.state()["records"] == 72 + 4


def test_a_folder_with_nothing_yet_is_shown_empty(tmp_path):
    state = NodeWatch(tmp_path / "not-started", "later", points=10).state()
    assert state["records"] == 0 and all(points == [] for points in state["series"].values())
    assert "does not exist" in state["peers"]["error"]


def test_numbers_json_has_no_word_for_are_shown_as_nothing(tmp_path):
    folder = write_node_folder(tmp_path / "odd", rounds=2)
    with (folder / "metrics.jsonl").open("a") as handle:  # what Python's json module writes and reads back
        handle.write('{"round": 2, "own_groups": 1, "own_reward": NaN, "time": Infinity, "train_policy_version": 3}\n')
    view = json.loads((folder / "peers.json").read_text())
    view["peers"][PEER_A]["score"] = float("nan")
    (folder / "peers.json").write_text(json.dumps(view))
    state = NodeWatch(folder, "odd", points=10).state()
    json.dumps(state, allow_nan=False)  # what the server sends
    assert [x for x, _ in state["series"]["own_reward"]] == [0, 1]
    assert state["latest"]["time"] is None and state["latest"]["round"] == 2
    assert {row["peer_id"]: row["score"] for row in state["peers"]["peers"]}[PEER_A] is None


def test_the_charts_are_labelled_with_the_declared_figures():
    tags = {f.tag for f in declared(RoundReport).values()} | {f.tag for f in FIGURES.values()}
    tags |= {f.tag for f in declared(type(RoundReport().swarm)).values()}
    drawn = [line for chart in layout() for line in chart["lines"]]
    assert {line["label"] for line in drawn} <= tags
    assert {line["key"] for line in drawn} >= {"own_reward", "eval_accuracy", "train_filtered_divergence_fraction",
                                               "train_is_weight_mean", "train_own_logprob_gap", "bytes_sent",
                                               "utilisation"}
    assert len(CHARTS) == 7


def test_two_folders_of_the_same_name_are_told_apart():
    assert node_names([Path("a/small"), Path("b/small"), Path("b/medium")]) == ["a/small", "b/small", "medium"]


def test_the_members_keep_the_last_good_reading_and_say_why_a_read_failed(monkeypatch):
    from ftis.node.dashboard import members as members_module

    member = Member("QmPeer", HOSTILE, "lora", "tok", 3, 4, 500, 1.0)
    readings = iter([MembersReading([member], 4, 4), TimeoutError("the DHT did not answer")])

    def read(*_args, **_kwargs):
        reading = next(readings)
        if isinstance(reading, Exception):
            raise reading
        return reading

    monkeypatch.setattr(members_module, "read_members", read)
    watch = MembersWatch(dht=None, run_id="run", shards=4, refresh_s=1.0)
    watch.read_once()
    assert watch.state()["members"][0]["model"] == HOSTILE and watch.state()["error"] is None
    watch.read_once()
    state = watch.state()
    assert state["members"][0]["peer_id"] == "QmPeer"
    assert state["members"][0]["reached"] == "?"  # how it is reached, as ftis-node status says it (not said yet)
    assert state["error"] == "TimeoutError: the DHT did not answer"


# --- the server -------------------------------------------------------------------------------------------


class _Members:
    """The members part of the content, as a hostile swarm could fill it."""

    def state(self):
        return {"run_id": HOSTILE, "read_at": 1.0, "error": None, "count": 1,
                "members": [{"peer_id": "Qm" + HOSTILE, "model": HOSTILE, "adapter": "full", "tokenizer": HOSTILE,
                             "policy_version": 1, "published_batches": 1, "published_tokens": 10, "last_seen": 1.0}]}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = write_node_folder(tmp_path_factory.mktemp("nodes") / "small", rounds=30)
    content = Content(HOSTILE, 5.0, _Members(), [NodeWatch(folder, "small", points=100)])
    dashboard = OpenDashboard(make_server(content, "127.0.0.1", 0), lambda: None)
    yield dashboard.url
    dashboard.close()


def get(url: str, host: str | None = None):
    request = urllib.request.Request(url, headers={"Host": host} if host else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def test_every_response_carries_a_strict_policy(served):
    for path, kind in [("", "text/html"), ("dashboard.js", "text/javascript"), ("dashboard.css", "text/css"),
                       ("api/nodes", "application/json"), ("nothing-here", "text/plain")]:
        status, headers, _ = get(served + path)
        assert status == (404 if path == "nothing-here" else 200), path
        assert headers["Content-Type"].startswith(kind), path
        policy = headers["Content-Security-Policy"]
        assert "default-src 'none'" in policy and "script-src 'self'" in policy, path
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert headers["X-Content-Type-Options"] == "nosniff"


def test_a_request_for_another_host_name_is_refused(served):
    assert get(served + "api/members", host="attacker.example:80")[0] == 421
    port = served.rsplit(":", 1)[1].rstrip("/")
    assert get(served + "api/members", host=f"localhost:{port}")[0] == 200


def test_the_page_has_no_inline_script_and_its_script_builds_no_markup_from_data():
    page = (STATIC / "index.html").read_text()
    assert all('src="' in tag for tag in re.findall(r"<script[^>]*>", page))
    assert not re.search(r"\son\w+=", page) and "style=" not in page
    script = (STATIC / "dashboard.js").read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function("):
        assert sink not in script


def test_the_endpoints_hand_the_page_what_peers_wrote_as_data(served):
    layout_data = json.loads(get(served + "api/layout")[2])
    assert layout_data["run_id"] == HOSTILE and layout_data["nodes"] == ["small"]
    assert [chart["title"] for chart in layout_data["charts"]] == [chart.title for chart in CHARTS]
    members = json.loads(get(served + "api/members")[2])
    assert members["members"][0]["model"] == HOSTILE  # as JSON; the page shows it as text (the browser test)
    (node,) = json.loads(get(served + "api/nodes")[2])["nodes"]
    assert node["records"] == 30 + 6 and len(node["series"]["own_reward"]) == 30
    assert {row["peer_id"] for row in node["peers"]["peers"]} == {PEER_A, PEER_B}


# --- the address -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_a_loopback_address_is_served(host):
    check_bind(host, public=False)


@pytest.mark.parametrize("host", ["0.0.0.0", "", "::", "8.8.8.8"])
def test_a_public_address_is_refused_unless_asked(host):
    with pytest.raises(DashboardError, match=r"not a loopback address.*--public"):
        check_bind(host, public=False)
    check_bind(host, public=True)


def test_the_command_refuses_a_public_address_with_its_reason(tmp_path):
    result = CliRunner().invoke(app, ["dashboard", "--host", "0.0.0.0", "--port", "0", "--node", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "error: refusing to serve on 0.0.0.0" in result.output and "--public" in result.output


# --- connections that never finish a request --------------------------------------------------------------


def serving_threads() -> int:
    return sum("process_request_thread" in thread.name for thread in threading.enumerate())


def test_half_sent_requests_hold_a_bounded_number_of_threads_for_a_bounded_time(tmp_path):
    """200 connections that send half a request and wait: at most ``max_connections`` threads serve them, each new
    one beyond cuts the oldest (or is closed at once), and each served one is dropped after the request timeout; a
    real request then gets its answer."""
    content = Content("run", 5.0, _Members(), [])
    server = DashboardServer("127.0.0.1", 0, content, None, request_timeout_s=3.0, max_connections=8)
    dashboard = OpenDashboard(server, lambda: None)
    sockets, held = [], 0
    try:
        started = time.monotonic()
        for _ in range(200):
            sock = socket.create_connection(server.server_address[:2], timeout=5)
            sock.sendall(b"GET /api/layout HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no blank line: never finished
            sockets.append(sock)
            held = max(held, serving_threads())
        while server.turned_away + server.cut < 192 and time.monotonic() < started + 2.5:
            held = max(held, serving_threads())
            time.sleep(0.01)
        assert held <= 8 and server.turned_away + server.cut >= 192, (held, server.turned_away, server.cut)
        while serving_threads() and time.monotonic() < started + 10:  # the request timeout frees the 8
            time.sleep(0.05)
        assert serving_threads() == 0
        assert get(dashboard.url + "api/layout")[0] == 200  # the slots are free again
    finally:
        for sock in sockets:
            sock.close()
        dashboard.close()


TRICKLED = b"GET /api/layout HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: a-byte-every-half-second\r\n\r\n"


def trickle(server: DashboardServer, count: int, every_s: float, until_s: float, real_request_at_s: float):
    """``count`` connections each sending ``TRICKLED`` a byte every ``every_s``; at ``real_request_at_s`` a real
    request. Returns (each connection's seconds until the server closed it, or None; what it answered each; the
    real request's status, or the error that closed it)."""
    started = time.monotonic()
    socks = [socket.create_connection(server.server_address[:2], timeout=5) for _ in range(count)]
    closed_after: dict[socket.socket, float] = {}
    answers = {sock: b"" for sock in socks}
    sent = dict.fromkeys(socks, 0)
    real: int | str | None = None
    try:
        while len(closed_after) < count and time.monotonic() < started + until_s:
            for sock in socks:
                if sock not in closed_after and sent[sock] < len(TRICKLED):
                    try:
                        sent[sock] += sock.send(TRICKLED[sent[sock]:sent[sock] + 1])
                    except OSError:
                        closed_after[sock] = time.monotonic() - started
            if real is None and time.monotonic() >= started + real_request_at_s:
                try:
                    real = get(server.url + "api/layout")[0]
                except OSError as error:  # urllib's errors for a connection closed unanswered
                    real = type(error).__name__
            readable, _, _ = select.select([s for s in socks if s not in closed_after], [], [], every_s)
            for sock in readable:
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                answers[sock] += data
                if not data:
                    closed_after[sock] = time.monotonic() - started
        assert all(sent[sock] < len(TRICKLED) for sock in socks)  # none finished its request
        return [closed_after.get(sock) for sock in socks], [answers[sock] for sock in socks], real
    finally:
        for sock in socks:
            sock.close()


def test_trickling_connections_are_closed_at_the_deadline_and_a_real_request_is_answered_meanwhile():
    """Every slot held by a connection that sends a byte every 0.5 s (each read well within any per-read timeout):
    each is closed 2 s after it connected, with a 408 (or cut sooner to make room), and a request sent whole
    meanwhile gets its answer."""
    content = Content("run", 5.0, _Members(), [])
    server = DashboardServer("127.0.0.1", 0, content, None, request_timeout_s=2.0, max_connections=4)
    dashboard = OpenDashboard(server, lambda: None)
    try:
        closed_after, answers, real = trickle(server, 4, every_s=0.5, until_s=5.0, real_request_at_s=0.6)
    finally:
        dashboard.close()
    assert real == 200, f"a real request sent while slow ones held every slot was not answered ({real})"
    assert all(after is not None and after < 3.0 for after in closed_after), closed_after
    timed_out = [after for after, answer in zip(closed_after, answers, strict=True)
                 if answer.startswith(b"HTTP/1.0 408 ")]
    assert len(timed_out) >= 3 and all(after > 1.9 for after in timed_out), (closed_after, answers)
    assert server.cut + len(timed_out) == 4


def raw_status(url: str, headers: list[str]) -> bytes:
    """The status line the server answers a GET of /api/layout with ``headers`` with."""
    address = url.split("//", 1)[1].rstrip("/")
    host, port = address.rsplit(":", 1)
    request = "".join(f"{line}\r\n" for line in ["GET /api/layout HTTP/1.1", f"Host: {address}", *headers, ""])
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request.encode())
        answer = b""
        while b"\r\n" not in answer and (data := sock.recv(4096)):
            answer += data
    return answer.split(b"\r\n", 1)[0]


def test_an_over_long_request_head_is_refused(served):
    assert raw_status(served, ["Accept: */*"]) == b"HTTP/1.0 200 OK"
    too_many = [f"X-Header-{i}: {i}" for i in range(80)]  # 1.3 KiB, in too many lines
    assert raw_status(served, too_many) == b"HTTP/1.0 431 Request Header Fields Too Large"
    too_long = ["Cookie: " + "x" * 40_000]  # in a few lines, too many bytes
    assert raw_status(served, too_long) == b"HTTP/1.0 431 Request Header Fields Too Large"
    assert get(served + "api/layout")[0] == 200  # the server goes on
