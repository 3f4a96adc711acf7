"""Checkpoints of tiny nodes over the in-memory transport: atomic writes, verified reads, corrupt and
mismatched checkpoints refused, keep-last-K, and a resume that continues exactly like an uninterrupted run.

Run: python -m pytest tests/test_checkpoint.py -q
"""

import copy
import json
import random

import pytest
import torch
from helpers import nodes as node_helpers

from ftis.node.models.export import read_export_record
from ftis.node.runner import checkpoint_files as ckpt
from ftis.node.runner.checkpoint_files import (
    MANIFEST,
    MODEL_FILE,
    STATE_FILE,
    CheckpointError,
    CheckpointMismatchError,
    CorruptCheckpointError,
    NoCheckpointError,
    config_changes,
    list_checkpoints,
    read_checkpoint,
    resume_latest,
    save_checkpoint,
)
from ftis.node.runner.checkpointer import CheckpointsExistError
from ftis.node.runner.join import run_node
from ftis.node.runner.node import Node, RoundInterrupted
from ftis.node.swarm.memory import MemoryHub


def make_node(model: str = "tiny-small", adapter: str = "full", checkpoint: dict | None = None,
              learning_rate: float = 1e-2) -> Node:
    return node_helpers.make_node(MemoryHub(), "solo", model, adapter, seed=1, trainer={"learning_rate": learning_rate},
                                  metrics={"display": "lines", "tensorboard": False}, checkpoint=checkpoint or {})


def published(node: Node) -> list:
    """The batches ``node`` publishes from now on, in order."""
    batches, publish = [], node.transport.publish
    node.transport.publish = lambda batch: (batches.append(batch), publish(batch))[1]
    return batches


def same_batches(a, b) -> bool:
    """Same prompts and the same sampled completions (the creation time aside)."""
    return len(a.groups) == len(b.groups) and all(
        ga.task == gb.task and ga.prompt_ids.tolist() == gb.prompt_ids.tolist()
        and [c.token_ids.tolist() for c in ga.completions] == [c.token_ids.tolist() for c in gb.completions]
        for ga, gb in zip(a.groups, b.groups, strict=True))


def assert_same_optimizer_state(a: dict, b: dict) -> None:
    assert a["param_groups"] == b["param_groups"]
    assert a["state"].keys() == b["state"].keys()
    for key, state in a["state"].items():
        assert state.keys() == b["state"][key].keys()
        for name, value in state.items():
            assert torch.equal(value, b["state"][key][name]), (key, name)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A full node after two rounds, with checkpoints after round 1 and round 2 (in a module-wide folder
    that tests copy before damaging)."""
    node = make_node()
    folder = tmp_path_factory.mktemp("trained") / "checkpoints"
    for _ in range(2):
        node.run_round()
        save_checkpoint(node, folder, keep_last=5)
    assert node.trainer.policy_version > 0, "no round trained: the checkpoint would hold no optimizer state"
    return node, folder


def copy_of(folder, tmp_path):
    import shutil

    return shutil.copytree(folder, tmp_path / "checkpoints")


def test_a_checkpoint_reads_back_what_was_saved(trained):
    node, folder = trained
    assert [p.name for p in list_checkpoints(folder)] == ["round-00000001", "round-00000002"]
    assert sorted(p.name for p in folder.iterdir()) == ["round-00000001", "round-00000002"]  # nothing hidden left
    checkpoint = read_checkpoint(folder / "round-00000002")
    assert (checkpoint.round, checkpoint.policy_version) == (2, node.trainer.policy_version)
    assert checkpoint.config == node.config.model_dump(mode="json")
    assert checkpoint.model == {"name": "tiny-small", "adapter": "full", "fingerprint": node.policy.fingerprint,
                                "lora_rank": None, "lora_alpha": None, "revision": None}
    for name, tensor in node.policy.model.state_dict().items():
        assert torch.equal(checkpoint.weights[name], tensor), name
    assert_same_optimizer_state(checkpoint.state.trainer["optimizer"], node.trainer.optimizer.state_dict())
    assert checkpoint.state.rng.numpy == node._rng.bit_generator.state
    manifest = json.loads((folder / "round-00000002" / MANIFEST).read_text())
    assert set(manifest["files"]) == {MODEL_FILE, STATE_FILE}


def test_a_save_interrupted_midway_leaves_the_earlier_checkpoints_and_no_debris(trained, tmp_path, monkeypatch):
    node, folder = trained
    folder = copy_of(folder, tmp_path)
    (folder / ".tmp-round-00000009-dead").mkdir()  # what a writer killed mid-save leaves behind
    (folder / ".tmp-round-00000009-dead" / MODEL_FILE).write_bytes(b"half")
    assert [p.name for p in list_checkpoints(folder)] == ["round-00000001", "round-00000002"]

    def fsync_then_ctrl_c(path):
        raise KeyboardInterrupt  # after every file is written, before the rename

    monkeypatch.setattr(ckpt, "fsync_folder", fsync_then_ctrl_c)
    node.round += 1  # a new round to save (the state itself is unchanged)
    try:
        with pytest.raises(KeyboardInterrupt):
            save_checkpoint(node, folder, keep_last=1)
    finally:
        node.round -= 1
    assert sorted(p.name for p in folder.iterdir()) == ["round-00000001", "round-00000002"]
    assert read_checkpoint(folder / "round-00000002").round == 2


def test_a_damaged_checkpoint_is_refused_and_resume_falls_back_to_the_previous_one(trained, tmp_path):
    _, folder = trained
    folder = copy_of(folder, tmp_path)
    weights = folder / "round-00000002" / MODEL_FILE
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte
    weights.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match=r"model\.pt does not match its SHA-256"):
        read_checkpoint(folder / "round-00000002")

    fresh = make_node()
    resumed = resume_latest(fresh, folder)
    assert resumed.checkpoint.path.name == "round-00000001" and fresh.round == 1
    assert [s.path.name for s in resumed.skipped] == ["round-00000002"]
    assert "SHA-256" in resumed.skipped[0].reason


@pytest.mark.parametrize(("damage", "message"), [
    (lambda p: (p / MANIFEST).write_text('{"format": 1, "round": 2'), "checkpoint.json is unreadable"),
    (lambda p: (p / MANIFEST).unlink(), "checkpoint.json is missing"),
    (lambda p: (p / STATE_FILE).unlink(), "state.pt is missing"),
    (lambda p: (p / STATE_FILE).write_bytes((p / STATE_FILE).read_bytes()[:-10]), "state.pt has"),
    (lambda p: (p / MANIFEST).write_text(json.dumps({**json.loads((p / MANIFEST).read_text()), "round": 7})),
     "does not match round 7"),
])
def test_each_kind_of_damage_is_named(trained, tmp_path, damage, message):
    _, folder = trained
    folder = copy_of(folder, tmp_path)
    for path in list_checkpoints(folder):
        damage(path)
    with pytest.raises(CorruptCheckpointError, match=message):
        read_checkpoint(folder / "round-00000002")
    with pytest.raises(CorruptCheckpointError, match="no valid checkpoint"):
        resume_latest(make_node(), folder)


def test_a_failed_write_is_a_checkpoint_error_and_leaves_nothing_behind(trained, tmp_path, monkeypatch):
    node, folder = trained
    folder = copy_of(folder, tmp_path)

    def disk_full(path, write):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt, "_write", disk_full)
    node.round += 1
    try:
        with pytest.raises(CheckpointError, match=r"round-00000003: .*No space left"):
            save_checkpoint(node, folder, keep_last=1)
    finally:
        node.round -= 1
    assert sorted(p.name for p in folder.iterdir()) == ["round-00000001", "round-00000002"]


def test_a_resume_with_another_learning_rate_keeps_the_moments_and_takes_the_new_rate(trained):
    _, folder = trained
    fresh = make_node(learning_rate=1e-3)
    resumed = resume_latest(fresh, folder)
    state, saved = fresh.trainer.optimizer.state_dict(), resumed.checkpoint.state.trainer["optimizer"]
    assert [group["lr"] for group in state["param_groups"]] == [1e-3]
    assert_same_optimizer_state({**state, "param_groups": saved["param_groups"]}, saved)
    assert config_changes(resumed.checkpoint.config, fresh.config.model_dump(mode="json")) == ["trainer.learning_rate"]


def test_resuming_from_nothing_is_a_clear_error(tmp_path):
    with pytest.raises(NoCheckpointError, match="no checkpoint to resume from"):
        resume_latest(make_node(), tmp_path / "checkpoints")


@pytest.mark.parametrize(("model", "adapter", "field"), [("tiny-medium", "full", "name"),
                                                         ("tiny-small", "lora", "adapter")])
def test_a_checkpoint_of_another_model_is_refused_untouched(trained, model, adapter, field):
    _, folder = trained
    other = make_node(model, adapter)
    before = [p.detach().clone() for p in other.trainer.parameters]
    with pytest.raises(CheckpointMismatchError, match=rf"another model \(.*{field} "):
        resume_latest(other, folder)
    assert other.round == 0 and other.trainer.policy_version == 0
    assert all(torch.equal(a, b) for a, b in zip(before, other.trainer.parameters, strict=True))


def test_only_the_newest_k_checkpoints_are_kept(tmp_path):
    node, folder = make_node(), tmp_path / "checkpoints"
    for _ in range(4):
        node.run_round()
        save_checkpoint(node, folder, keep_last=2)
    assert [p.name for p in list_checkpoints(folder)] == ["round-00000003", "round-00000004"]
    assert sorted(p.name for p in folder.iterdir()) == ["round-00000003", "round-00000004"]


@pytest.mark.parametrize("adapter", ["full", "lora"])
def test_a_resumed_node_continues_exactly_like_an_uninterrupted_one(tmp_path, adapter):
    folder = tmp_path / "checkpoints"
    straight = make_node(adapter=adapter)
    batches = published(straight)
    for _ in range(2):
        straight.run_round()
    save_checkpoint(straight, folder, keep_last=1)
    saved_optimizer = copy.deepcopy(straight.trainer.optimizer.state_dict())
    saved_version = straight.trainer.policy_version
    assert saved_version > 0
    draws = (random.random(), torch.rand(3))  # the global RNGs continue from the checkpoint too
    straight.run_round()

    resumed = make_node(adapter=adapter)
    resumed_batches = published(resumed)
    result = resume_latest(resumed, folder)
    assert (result.checkpoint.round, resumed.round) == (2, 2)
    assert resumed.trainer.policy_version == resumed.generator.policy_version == saved_version
    assert_same_optimizer_state(resumed.trainer.optimizer.state_dict(), saved_optimizer)
    assert random.random() == draws[0] and torch.equal(torch.rand(3), draws[1])
    resumed.run_round()

    assert same_batches(resumed_batches[0], batches[2])  # round 3: the same prompts and samples
    assert resumed_batches[0].round == batches[2].round == 2
    assert resumed.trainer.policy_version == straight.trainer.policy_version
    for a, b in zip(resumed.trainer.parameters, straight.trainer.parameters, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert_same_optimizer_state(resumed.trainer.optimizer.state_dict(), straight.trainer.optimizer.state_dict())


class StopOnCall:
    """Wraps ``target.name`` so that its ``n``-th call (1-based) raises ``error`` instead of running."""

    def __init__(self, target, name: str, n: int, error: BaseException):
        self.calls, self.n, self.error, self.wrapped = 0, n, error, getattr(target, name)
        setattr(target, name, self)

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == self.n:
            raise self.error
        return self.wrapped(*args, **kwargs)


def test_ctrl_c_mid_round_checkpoints_the_last_completed_round(tmp_path):
    reference = make_node()
    reference_batches = published(reference)
    reference.run_round()
    reference.run_round()

    node = make_node()
    StopOnCall(node.generator, "generate", 2, KeyboardInterrupt())  # round 2 drew its problems, then stopped
    node.run_round()
    with pytest.raises(KeyboardInterrupt):
        node.run_round()
    save_checkpoint(node, tmp_path, keep_last=1)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["round-00000001"]

    resumed = make_node()
    resumed_batches = published(resumed)
    resume_latest(resumed, tmp_path)
    resumed.run_round()
    assert same_batches(resumed_batches[0], reference_batches[1])  # the interrupted round's draws are undone


def test_a_round_stopped_inside_its_optimizer_step_is_not_checkpointed(tmp_path):
    node = make_node()
    StopOnCall(node.trainer.optimizer, "step", 1, KeyboardInterrupt())
    for _ in range(10):  # rounds without reward variance take no step; the first that does is stopped
        try:
            node.run_round()
        except KeyboardInterrupt:
            break
    else:
        pytest.fail("no round took an optimizer step")
    with pytest.raises(RoundInterrupted, match="inside its optimizer step"):
        save_checkpoint(node, tmp_path, keep_last=1)
    assert list_checkpoints(tmp_path) == []


def test_run_node_checkpoints_periodically_and_on_ctrl_c_then_resumes_appending_metrics(tmp_path):
    lines: list[str] = []
    node = make_node(checkpoint={"every_rounds": 2, "keep_last": 5, "export_on_checkpoint": False})
    StopOnCall(node.generator, "generate", 4, KeyboardInterrupt())  # Ctrl-C during round 3
    with pytest.raises(KeyboardInterrupt):
        run_node(node, rounds=None, out=tmp_path, echo=lines.append)
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["round-00000002", "round-00000003"]
    assert read_export_record(tmp_path / "export")["policy_version"] == node.trainer.policy_version  # at exit
    assert sum(": checkpoint " in line for line in lines) == 2, lines
    metrics = (tmp_path / "metrics.jsonl").read_text()

    with pytest.raises(CheckpointsExistError, match="--resume"):  # a new run would mix with the old one
        run_node(make_node(), rounds=1, out=tmp_path, echo=lines.append)
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["round-00000002", "round-00000003"]

    lines.clear()
    resumed = make_node(checkpoint={"every_rounds": 2, "keep_last": 5, "export_on_checkpoint": False})
    run_node(resumed, rounds=2, out=tmp_path, echo=lines.append, resume=True)
    assert any(line.startswith("resumed from ") and "round 3" in line for line in lines), lines
    text = (tmp_path / "metrics.jsonl").read_text()
    assert text.startswith(metrics)  # appended, not truncated
    assert [json.loads(line)["round"] for line in text.splitlines() if '"round"' in line][-2:] == [3, 4]
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")][-1] == "round-00000005"
