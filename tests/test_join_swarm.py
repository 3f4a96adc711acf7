"""``ftis-node join`` as users run it: a bootstrap and two heterogeneous tiny-model nodes (a full
``tiny-small`` and a LoRA ``tiny-medium``), each its own process, on 127.0.0.1 over real hivemind,
in ``rounds`` mode so that each round waits for the other's batch. Each trains on the other's
groups, writes its metrics, stops after ``--rounds`` and leaves no process behind.

Run: python -m pytest tests/test_join_swarm.py -q   (marker ``hivemind``; ~30-60 s, mostly torch imports)
"""

import json
import re
from pathlib import Path

import psutil
import pytest
from helpers.cli_process import CliProcess
from helpers.join_config import write_join_config

from ftis.node.swarm.peers.peer_view import read_peer_view

pytestmark = pytest.mark.hivemind

RUN = "join-test"
ROUNDS = 3
NODES = {"small": ("tiny-small", "full"), "medium": ("tiny-medium", "lora")}


def node_config(folder: Path, model: str, adapter: str) -> Path:
    return write_join_config(folder, model=model, adapter=adapter, run_id=RUN, round_deadline_s=30.0, min_peers=1)


def step_records(folder: Path) -> list[dict]:
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [record for record in records if "own_groups" in record]  # evaluation records have their own shape


def test_two_join_processes_train_on_each_others_groups_through_a_bootstrap(tmp_path):
    bootstrap = CliProcess("bootstrap", "--host-maddrs", "/ip4/127.0.0.1/tcp/0", "--run-id", RUN)
    nodes: dict[str, CliProcess] = {}
    try:
        maddr = bootstrap.maddr()
        for name, (model, adapter) in NODES.items():
            folder = tmp_path / name
            folder.mkdir()
            nodes[name] = CliProcess("join", "--peer", maddr, "--config", str(node_config(folder, model, adapter)),
                                     "--rounds", str(ROUNDS), "--out", str(folder / "out"))
        family = {name: psutil.Process(node.process.pid) for name, node in nodes.items()}
        finished = {name: node.wait(timeout=240) for name, node in nodes.items()}
        bootstrap_status, bootstrap_output = bootstrap.terminate()
    finally:
        for node in nodes.values():
            node.kill()
        bootstrap.kill()
    assert bootstrap_status == 0, bootstrap_output
    peer_ids = {}
    for name, (status, output) in finished.items():
        assert status == 0, f"{name}:\n{output}"
        assert "Traceback" not in output, output
        found = re.search(r"node (\S+) \(", output)
        assert found, output
        peer_ids[name] = found[1]
    assert not any(process.is_running() and process.status() != psutil.STATUS_ZOMBIE for process in family.values())
    for name, other in (("small", "medium"), ("medium", "small")):
        records = step_records(tmp_path / name / "out")
        assert [record["round"] for record in records] == list(range(ROUNDS)), records
        # Two nodes: every peer group one receives is the other's. (Nearly cold models score 0 everywhere on
        # arithmetic, so their groups teach nothing and take no place in a step: received, not used.)
        received = sum(record["peer_groups_received"] for record in records)
        assert received > 0, f"{name} never received {other}'s groups: {records}"
        assert all(record["peers_scored"] == 1 for record in records[1:]), records  # the other node, judged
        assert peer_ids[other] in read_peer_view(tmp_path / name / "out").scores
        assert all(record["bytes_sent"] > 0 for record in records)
