"""A node that joins a swarm which has trained without it, as users run it: a bootstrap and a ``tiny-small`` node
training in ``rounds`` mode, each its own ``ftis-node`` process on 127.0.0.1 over real hivemind; once that node has
trained a few rounds, a fresh ``tiny-medium`` LoRA node joins. The newcomer starts at the swarm's round, not at 0:
its very first step has the other node's groups, with no deadline waited out. (``python -m benchmarks.late_joiner``
measures the same on the demo's nodes: docs/learning.md.)

Run: python -m pytest tests/test_late_joiner.py -q   (marker ``hivemind``; ~1 min, mostly torch imports)
"""

import json
import time
from pathlib import Path

import pytest
from helpers.cli_process import CliProcess
from helpers.join_config import write_join_config

pytestmark = pytest.mark.hivemind

RUN = "late-joiner-test"
DEADLINE_S = 60.0  # a round's wait for its peers; the newcomer's first round must not wait it out
AHEAD = 6  # rounds the first node trains before the newcomer starts
JOINER_ROUNDS = 3


def node_config(folder: Path, model: str, adapter: str, min_peers: int) -> Path:
    return write_join_config(folder, model=model, adapter=adapter, run_id=RUN, round_deadline_s=DEADLINE_S,
                             min_peers=min_peers)


def steps(folder: Path) -> list[dict]:
    path = folder / "metrics.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [record for record in map(json.loads, lines) if "own_groups" in record]


def test_a_newcomer_starts_at_the_swarms_round_and_trains_on_its_groups_from_its_first_step(tmp_path):
    bootstrap = CliProcess("bootstrap", "--host-maddrs", "/ip4/127.0.0.1/tcp/0", "--run-id", RUN)
    first = joiner = None
    try:
        maddr = bootstrap.maddr()
        first_out = tmp_path / "first" / "out"
        first = CliProcess("join", "--peer", maddr, "--config",
                           str(node_config(tmp_path / "first", "tiny-small", "full", min_peers=0)),
                           "--out", str(first_out))
        deadline = time.monotonic() + 180
        while len(steps(first_out)) < AHEAD and time.monotonic() < deadline:
            assert first.process.poll() is None, first.output
            time.sleep(0.2)
        assert len(steps(first_out)) >= AHEAD, first.output
        swarm_round = steps(first_out)[-1]["round"]
        joiner_out = tmp_path / "joiner" / "out"
        joiner = CliProcess("join", "--peer", maddr, "--config",
                            str(node_config(tmp_path / "joiner", "tiny-medium", "lora", min_peers=1)),
                            "--rounds", str(JOINER_ROUNDS), "--out", str(joiner_out))
        status, output = joiner.wait(timeout=240)
        first_status, first_output = first.terminate()
        bootstrap.terminate()
    finally:
        for process in (joiner, first, bootstrap):
            if process is not None:
                process.kill()
    assert status == 0, output
    assert first_status == 0, first_output
    joined = steps(joiner_out)
    assert len(joined) == JOINER_ROUNDS, joined
    # its first round is the swarm's (the first node trained on alone meanwhile), not round 0
    assert joined[0]["round"] > swarm_round >= AHEAD - 1, (swarm_round, joined)
    rounds = [record["round"] for record in joined]
    assert rounds == sorted(set(rounds)), rounds  # onward from there, falling into step where the other is ahead
    # its first step already has the other node's groups, which were out when it arrived: no deadline waited
    assert joined[0]["peer_groups_received"] > 0, joined[0]
    assert all(record["waited_seconds"] < DEADLINE_S / 2 for record in joined), joined
