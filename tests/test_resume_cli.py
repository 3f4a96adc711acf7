"""``ftis-node join --resume`` as a user runs it (marker ``hivemind``: a lone node starts its own DHT on
127.0.0.1): a node is SIGKILLed once it has checkpointed, restarted with ``--resume``, and continues from
the same round with the same optimizer state, appending to its metrics. Nothing is left running.

Run: python -m pytest tests/test_resume_cli.py -q

The model is a local folder (``helpers/digit_model.py``): tiny-small taught to answer any prompt with one digit.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import reap, stray_processes
from helpers.digit_model import digit_model, write_node_config

from ftis.node.runner.checkpoint_files import CheckpointError, list_checkpoints, read_checkpoint, read_manifest

pytestmark = pytest.mark.hivemind

FTIS_NODE = str(Path(sys.executable).with_name("ftis-node"))  # the entry point installed beside this Python
START_TIMEOUT_S = 90.0  # importing torch and hivemind dominates, and a loaded machine takes several times longer


def newest_trained_checkpoint(folder: Path) -> int | None:
    """Rounds of the newest checkpoint once one holds a trained step (None: not yet)."""
    paths = list_checkpoints(folder)
    if not paths:
        return None
    try:
        manifest = read_manifest(paths[-1])
    except (CheckpointError, FileNotFoundError):  # deleted (keep_last) between listing and reading
        return None
    return manifest["round"] if manifest["policy_version"] > 0 else None


def test_a_killed_node_resumes_from_its_checkpoint_with_the_same_round_and_optimizer_state(tmp_path):
    out = tmp_path / "node"
    config = write_node_config(tmp_path / "node.toml", digit_model(tmp_path / "digit-model"), "resume-test")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with (tmp_path / "first.log").open("w") as log:
        first = subprocess.Popen([FTIS_NODE, "join", "--config", str(config), "--out", str(out), "--rounds", "10000"],
                                 stdout=log, stderr=subprocess.STDOUT, env=env)
    family: list[psutil.Process] = []
    first_log = tmp_path / "first.log"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while newest_trained_checkpoint(out / "checkpoints") is None:
            assert first.poll() is None, first_log.read_text()
            assert time.monotonic() < deadline, f"no trained checkpoint in time:\n{first_log.read_text()}"
            time.sleep(0.05)
        family = psutil.Process(first.pid).children(recursive=True)
        assert "p2pd" in {p.name() for p in family}
    finally:
        first.send_signal(signal.SIGKILL)  # no handler runs: the DHT process and p2pd are orphaned
        first.wait(30)
        reap(family)

    checkpoint = read_checkpoint(list_checkpoints(out / "checkpoints")[-1])  # atomic: the newest is whole
    metrics_before = (out / "metrics.jsonl").read_text()
    second = subprocess.run([FTIS_NODE, "join", "--out", str(out), "--resume", "--rounds", "2"],  # its settings
                            capture_output=True, text=True, env=env, timeout=START_TIMEOUT_S + 60)
    output = second.stdout + second.stderr
    assert second.returncode == 0, output
    assert "Traceback" not in output
    assert (f"resumed from {checkpoint.path}: round {checkpoint.round}, policy v{checkpoint.policy_version}"
            in second.stdout), output

    metrics = (out / "metrics.jsonl").read_text()
    assert metrics.startswith(metrics_before)  # appended, not truncated
    new = [json.loads(line) for line in metrics[len(metrics_before):].splitlines()]
    assert [r["round"] for r in new] == [checkpoint.round, checkpoint.round + 1]
    trained = sum(r["train_trained"] for r in new)
    assert new[-1]["train_policy_version"] == checkpoint.policy_version + trained
    assert trained > 0, "the resumed node took no step"

    final = read_checkpoint(list_checkpoints(out / "checkpoints")[-1])
    assert (final.round, final.policy_version) == (checkpoint.round + 2, checkpoint.policy_version + trained)
    # AdamW counts its steps per parameter: the count carried on from the checkpoint instead of restarting.
    steps = {float(state["step"]) for state in final.state.trainer["optimizer"]["state"].values()}
    assert steps == {float(final.policy_version)}

    deadline = time.monotonic() + 10
    while (left := stray_processes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"left running: {left}"
