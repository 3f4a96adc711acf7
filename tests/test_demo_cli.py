"""``ftis-node demo`` as a user runs it, shortened by a test config (tiny warm-up, a few rounds, a small
evaluation): a bootstrap and three node processes over real hivemind on 127.0.0.1, the summary, the plot,
and nothing left running afterwards — also when it is stopped with Ctrl-C or SIGTERM (with its dashboard
serving the swarm), or a node dies.

Run: python -m pytest tests/test_demo_cli.py -q   (marker ``hivemind``; about a minute per test on 2 cores)
"""

import json
import os
import re
import signal
import time
import urllib.request

import psutil
import pytest
from helpers.cli_process import CliProcess

from ftis.node.demo.children import group_alive

pytestmark = pytest.mark.hivemind

TEST_DEMO = """
[demo]
rounds = 2
solo = false                 # the short test turns it on with --solo
run_id = "demo-test"
stop_timeout_s = 20.0

[common.task]
name = "arithmetic"
arithmetic = { max_digits = 1, operations = "+" }

[common.generation]
prompts_per_round = 2
group_size = 4
max_new_tokens = 4
batch_size = 8

[common.trainer]
learning_rate = 1e-4

[common.eval]
every = 1
limit = 16

[common.loop]
mode = "rounds"
min_peers = 2
round_deadline_s = 30.0

[common.metrics]
display = "lines"
tensorboard = false

[common.checkpoint]
every_rounds = 0

[common.swarm]
announce_interval_s = 1.0
poll_interval_s = 0.25

[common.model.warmup]
steps = 3
batch_size = 4
eval_problems = 4

[nodes.small]
model = { name = "tiny-small" }

[nodes.medium]
model = { name = "tiny-medium" }

[nodes.small-lora]
model = { name = "tiny-small", adapter = "lora", lora_rank = 4, lora_alpha = 8.0, seed = 1 }
"""
NODES = ("small", "medium", "small-lora")


def _demo_args(tmp_path, monkeypatch, config_text: str) -> list[str]:
    monkeypatch.setenv("FTIS_CACHE", str(tmp_path / "cache"))  # the subprocesses inherit it
    config = tmp_path / "demo.toml"
    config.write_text(config_text)
    return ["demo", "--config", str(config), "--out", str(tmp_path / "out")]


@pytest.fixture
def demo_args(tmp_path, monkeypatch):
    return _demo_args(tmp_path, monkeypatch, TEST_DEMO)


@pytest.fixture
def cold_demo_args(tmp_path, monkeypatch):
    """The same demo without warm starts (their subprocesses are ~10 s of a short demo): stopping needs none."""
    assert TEST_DEMO.count("\nsteps = 3\n") == 1
    return _demo_args(tmp_path, monkeypatch, TEST_DEMO.replace("\nsteps = 3\n", "\nsteps = 0\n"))


def started_pids(output: str) -> list[int]:
    """The bootstrap's and the nodes' pids, as the demo prints them (each leads a process group)."""
    return [int(pid) for pid in re.findall(r"\(pid (\d+)\)|, pid (\d+),", output) for pid in pid if pid]


def assert_nothing_left(demo: CliProcess, family: list[psutil.Process], output: str) -> None:
    """No process of the groups the demo started, and no descendant seen while it ran, is left. torch's
    ``torch_shm_manager`` runs in a session of its own and exits by itself once its client has: a grace."""
    pids = started_pids(output)
    assert pids, output
    assert not any(group_alive(pid) for pid in pids), output
    _, alive = psutil.wait_procs(family, timeout=15)
    assert not [p for p in alive if p.status() != psutil.STATUS_ZOMBIE], alive


def descendants(process: CliProcess) -> list[psutil.Process]:
    return psutil.Process(process.process.pid).children(recursive=True)


def metrics(folder) -> tuple[list[dict], list[dict]]:
    """A node folder's step records and evaluation records."""
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    steps = [record for record in records if "own_groups" in record]
    return steps, [record for record in records if "eval_total" in record and "own_groups" not in record]


def test_short_demo_with_solo_baseline_runs_to_a_summary_and_a_plot(demo_args, tmp_path):
    demo = CliProcess(*demo_args, "--rounds", "2", "--solo", "--dashboard")
    try:
        demo.wait_for(lambda line: line.startswith("small-lora:"), timeout=120)
        family = descendants(demo)
        status, output = demo.wait(timeout=300)
    finally:
        demo.kill()
    assert status == 0, output
    assert "Traceback" not in output, output
    out = tmp_path / "out"
    assert f"cache {tmp_path / 'cache' / 'warmup'}" in output  # where the warm start is kept, printed
    assert "bootstrap peer up" in output
    for name in NODES:
        steps, evaluations = metrics(out / name)
        assert [record["round"] for record in steps] == [0, 1], name
        assert sum(record["peer_groups_received"] for record in steps) > 0, f"{name} received no peer group"
        assert [record["round"] for record in evaluations] == [0, 1, 2]  # the start, every round, the end
        assert re.search(rf"^{name} +round +1 ", output, re.MULTILINE), output  # the live lines
        solo_steps, solo_evaluations = metrics(out / "solo" / name)
        assert len(solo_steps) == 2, name  # its start is its twin's (the same model): not evaluated again
        assert [record["round"] for record in solo_evaluations] == [1, 2], name
        assert sum(record["peer_groups_received"] for record in solo_steps) == 0, f"{name} was not alone"
        assert re.search(rf"^{name}-solo +round +1 ", output, re.MULTILINE), output
    summary = (out / "summary.md").read_text()
    for name in NODES:
        assert f"| {name} |" in summary
    assert "solo end" in summary and "not run" not in summary and summary in output
    data = json.loads((out / "summary.json").read_text())
    assert data["solo_ran"] and [node["rounds"] for node in data["nodes"]] == [2, 2, 2]
    assert all(node["start_accuracy"] is not None and node["solo_end_accuracy"] is not None for node in data["nodes"])
    assert all(node["ahead_of_solo"] == pytest.approx(node["end_accuracy"] - node["solo_end_accuracy"])
               for node in data["nodes"])  # in standard errors too, where they are not 0 (a tiny demo's can be)
    assert (out / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot: {out / 'accuracy.png'}" in output
    assert f"ftis-node dashboard --node {out / 'small'} --node {out / 'medium'}" in output  # to look again
    assert "stopped: the server and the DHT client are shut down" in (out / "dashboard.log").read_text()
    assert_nothing_left(demo, family, output)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_stops_every_process_it_started(cold_demo_args, signum):
    demo = CliProcess(*cold_demo_args, "--rounds", "10000", "--dashboard")
    try:
        url = re.search(r"http://\S+/", demo.wait_for(lambda line: line.startswith("dashboard (pid "), timeout=180))[0]
        demo.wait_for(lambda line: re.match(r"small-lora +round +1 ", line) is not None, timeout=180)
        assert_dashboard_shows_the_demo(url)
        family = descendants(demo)
        assert len(family) >= 4 * 2  # each node and the bootstrap have a DHT process and a p2pd below them
        demo.process.send_signal(signum)  # a terminal's Ctrl-C reaches the demo alone: children have own groups
        status, output = demo.wait(timeout=90)
    finally:
        demo.kill()
    assert status == 0, output
    assert "stopped: every process the demo started has ended" in output
    assert "Traceback" not in output, output
    assert_nothing_left(demo, family, output)


def assert_dashboard_shows_the_demo(url: str) -> None:
    """``--dashboard``: the page's endpoints show the three nodes' rounds and, from the DHT, the three members."""
    def get(path: str) -> dict:
        with urllib.request.urlopen(url + path, timeout=10) as response:
            return json.loads(response.read())

    nodes = get("api/nodes")["nodes"]
    assert [node["name"] for node in nodes] == list(NODES)
    assert all(node["series"]["own_reward"] for node in nodes)
    deadline = time.monotonic() + 60
    while get("api/members")["count"] < len(NODES):
        assert time.monotonic() < deadline, get("api/members")
        time.sleep(0.5)


def test_a_node_that_dies_stops_the_demo_which_names_it(cold_demo_args):
    demo = CliProcess(*cold_demo_args, "--rounds", "10000")
    try:
        line = demo.wait_for(lambda line: line.startswith("medium:") and "pid" in line, timeout=120)
        victim = int(re.search(r"pid (\d+)", line)[1])
        demo.wait_for(lambda line: re.match(r"medium +round +0 ", line) is not None, timeout=180)
        family = descendants(demo)
        os.kill(victim, signal.SIGKILL)
        started = time.monotonic()
        status, output = demo.wait(timeout=90)
    finally:
        demo.kill()
    assert status == 1, output
    assert f"node medium (pid {victim}) exited with status -9" in output
    assert time.monotonic() - started < 60
    assert_nothing_left(demo, family, output)
