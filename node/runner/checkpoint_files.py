"""A training node's checkpoints: written atomically, verified when read, refused for another model.

    from ftis.node.runner.checkpoint_files import resume_latest, save_checkpoint
    path = save_checkpoint(node, out / "checkpoints", keep_last=3)
    resumed = resume_latest(fresh_node, out / "checkpoints")  # same round, optimizer, policy version, RNG

A checkpoint is a folder ``round-00000012`` (12 rounds completed: the next round is number 12) holding
- ``model.pt``         the weights: the model's whole ``state_dict`` (full) or the adapter's parameters (LoRA);
- ``state.pt``         the optimizer's state and torch's CPU and CUDA RNG states;
- ``checkpoint.json``  written last: format, round, policy version, time, the model's identity (name, adapter,
                       tokenizer fingerprint, LoRA rank and alpha, revision), the config, the node's numpy and
                       python RNG states, and the size and SHA-256 of the two ``.pt`` files.

Atomic: the files go into a hidden sibling folder (``.tmp-…``); each file and the folder are fsynced, the
folder is renamed to its name, and the parent is fsynced. A reader, or a crash at any point, sees the
checkpoints as they were before or after, never half of one; hidden leftovers of a writer that died are
removed by the next save. Deletions (``keep_last``, replacing a checkpoint of the same round) rename the
folder aside first, so a half-deleted checkpoint is never listed either.

Reading checks the manifest, the sizes and the hashes before loading with ``torch.load(weights_only=True)``
(no pickled code runs). Resuming refuses a checkpoint written by another model (``CheckpointMismatchError``);
a corrupt newest checkpoint is skipped for the newest valid one, and the result names both.
"""

import hashlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import torch

from ftis.node.atomic import fsync_folder, replace_folder
from ftis.node.errors import UserError
from ftis.node.models import Policy
from ftis.node.runner.node import Node, NodeState
from ftis.node.runner.rng import RngState

FORMAT = 1
MANIFEST, MODEL_FILE, STATE_FILE = "checkpoint.json", "model.pt", "state.pt"
_NAME = re.compile(r"^round-(\d+)$")
_HIDDEN = (".tmp-", ".old-")  # a save in progress, or a checkpoint on its way out
_MANIFEST_KEYS = {"format": int, "round": int, "policy_version": int, "created_at": (int, float), "model": dict,
                  "config": dict, "rng": dict, "files": dict}


class CheckpointError(UserError, RuntimeError):
    """A checkpoint cannot be written, read or resumed from; the message says which and why."""


class NoCheckpointError(CheckpointError):
    """There is no checkpoint to resume from."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint is incomplete or damaged (missing file, bad manifest, size or hash mismatch)."""


class CheckpointMismatchError(CheckpointError):
    """A checkpoint was written by another model, adapter or tokenizer than the node resuming from it."""


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint read back and verified."""

    path: Path
    round: int
    policy_version: int
    model: dict[str, Any]  # the identity of the model that wrote it (model_identity)
    config: dict[str, Any]  # NodeConfig.model_dump(mode="json") of the node that wrote it
    weights: dict[str, torch.Tensor]
    state: NodeState


@dataclass(frozen=True)
class Skipped:
    path: Path
    reason: str


@dataclass(frozen=True)
class Resumed:
    checkpoint: Checkpoint  # the one the node now continues from
    skipped: list[Skipped]  # newer checkpoints that failed verification


def model_identity(policy: Policy) -> dict[str, Any]:
    """What a checkpoint's weights mean: a resume by a node whose identity differs is refused."""
    name = Path(policy.name).expanduser()
    return {
        "name": str(name.resolve()) if name.exists() else policy.name,  # a folder, however it was spelled
        "adapter": policy.adapter,
        "fingerprint": policy.fingerprint,
        "lora_rank": policy.lora_rank,
        "lora_alpha": policy.lora_alpha,
        "revision": policy.revision,
    }


def list_checkpoints(folder: Path) -> list[Path]:
    """The checkpoint folders in ``folder``, oldest (fewest rounds) first; hidden leftovers are not listed."""
    if not folder.is_dir():
        return []
    found = [(int(match[1]), path) for path in folder.iterdir() if (match := _NAME.match(path.name))]
    return [path for _, path in sorted(found)]


def save_checkpoint(node: Node, folder: Path, keep_last: int) -> Path:
    """Write the node's state as of its last completed round into ``folder``; keep the newest ``keep_last``.

    Raises ``RoundInterrupted`` (from ``Node.state_dict``) when the node was stopped inside an optimizer step.
    """
    if keep_last < 1:
        raise ValueError(f"keep_last must be at least 1, not {keep_last}")
    state = node.state_dict()
    target = folder / f"round-{state.round:08d}"
    staging = folder / f".tmp-{target.name}-{uuid.uuid4().hex[:8]}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _remove_leftovers(folder)
        staging.mkdir()
        files = {
            MODEL_FILE: _write(staging / MODEL_FILE, lambda f: torch.save(_weights(node.policy), f)),
            STATE_FILE: _write(staging / STATE_FILE, lambda f: torch.save(
                {"optimizer": state.trainer["optimizer"], "torch_cpu": state.rng.torch_cpu,
                 "torch_cuda": list(state.rng.torch_cuda)}, f)),
        }
        manifest = {
            "format": FORMAT,
            "round": state.round,
            "policy_version": int(state.trainer["policy_version"]),
            "created_at": time.time(),
            "model": model_identity(node.policy),
            "config": node.config.model_dump(mode="json"),
            "rng": {"numpy": state.rng.numpy, "python": state.rng.python},
            "files": files,
        }
        _write(staging / MANIFEST, lambda f: f.write(json.dumps(manifest, indent=1).encode()))
        fsync_folder(staging)
        replace_folder(staging, target)
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, OSError):  # a full disk, a read-only folder...
            raise CheckpointError(f"cannot write the checkpoint {target}: {error}") from error
        raise
    for old in list_checkpoints(folder)[:-keep_last]:
        _delete(old)
    return target


def read_checkpoint(path: Path) -> Checkpoint:
    """Read and verify the checkpoint folder ``path``; ``CorruptCheckpointError`` says what is wrong."""
    manifest = read_manifest(path)
    for name in (MODEL_FILE, STATE_FILE):
        _verify(path / name, manifest["files"].get(name))
    weights = _load(path / MODEL_FILE)
    saved = _load(path / STATE_FILE)
    if not isinstance(weights, dict) or not isinstance(saved, dict) or {"optimizer", "torch_cpu"} - saved.keys():
        raise CorruptCheckpointError(f"{path}: {MODEL_FILE} or {STATE_FILE} does not hold what a checkpoint holds")
    rng = manifest["rng"]
    state = NodeState(
        round=manifest["round"],
        rng=RngState(numpy=rng["numpy"], python=rng["python"], torch_cpu=saved["torch_cpu"],
                     torch_cuda=tuple(saved.get("torch_cuda", ()))),
        trainer={"optimizer": saved["optimizer"], "policy_version": manifest["policy_version"]},
    )
    return Checkpoint(path, manifest["round"], manifest["policy_version"], manifest["model"], manifest["config"],
                      weights, state)


def read_manifest(path: Path) -> dict[str, Any]:
    """The checkpoint's ``checkpoint.json``, checked for its keys and their types (not the files' hashes)."""
    try:
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CorruptCheckpointError(f"{path}: {MANIFEST} is missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CorruptCheckpointError(f"{path}: {MANIFEST} is unreadable ({error})") from None
    if not isinstance(manifest, dict):
        raise CorruptCheckpointError(f"{path}: {MANIFEST} is not a JSON object")
    for key, kind in _MANIFEST_KEYS.items():
        value = manifest.get(key)
        if isinstance(value, bool) or not isinstance(value, kind):
            raise CorruptCheckpointError(f"{path}: {MANIFEST} lacks a valid {key!r}")
    if manifest["format"] != FORMAT:
        raise CorruptCheckpointError(f"{path}: checkpoint format {manifest['format']}; this version reads {FORMAT}")
    match = _NAME.match(path.name)
    if match is None or int(match[1]) != manifest["round"]:
        raise CorruptCheckpointError(f"{path}: the folder's name does not match round {manifest['round']}")
    if not isinstance(manifest["rng"].get("numpy"), dict) or not isinstance(manifest["rng"].get("python"), list):
        raise CorruptCheckpointError(f"{path}: {MANIFEST} lacks valid RNG states")
    return manifest


def restore(node: Node, checkpoint: Checkpoint) -> None:
    """Load ``checkpoint`` into ``node``: weights, optimizer, policy version, round, RNG states."""
    current = model_identity(node.policy)
    differ = [f"{key} {checkpoint.model.get(key)!r} there, {value!r} here"
              for key, value in current.items() if checkpoint.model.get(key) != value]
    if differ:
        raise CheckpointMismatchError(
            f"{checkpoint.path} was written by another model ({'; '.join(differ)}): resume with the model "
            "settings it was written with, or give this node another --out folder")
    _load_weights(node.policy, checkpoint.weights, checkpoint.path)
    node.load_state_dict(checkpoint.state)


def resume_latest(node: Node, folder: Path) -> Resumed:
    """Restore the newest valid checkpoint in ``folder`` into ``node``; corrupt newer ones are skipped."""
    paths = list_checkpoints(folder)
    if not paths:
        raise NoCheckpointError(f"no checkpoint to resume from in {folder}")
    skipped: list[Skipped] = []
    for path in reversed(paths):
        try:
            checkpoint = read_checkpoint(path)
        except CorruptCheckpointError as error:
            skipped.append(Skipped(path, str(error)))
            continue
        restore(node, checkpoint)
        return Resumed(checkpoint, skipped)
    raise CorruptCheckpointError(f"no valid checkpoint in {folder}: " + "; ".join(s.reason for s in skipped))


def latest_config(folder: Path) -> dict[str, Any] | None:
    """The config recorded by the newest checkpoint whose manifest reads (None: there is none)."""
    for path in reversed(list_checkpoints(folder)):
        try:
            return read_manifest(path)["config"]
        except CorruptCheckpointError:
            continue
    return None


def config_changes(saved: dict[str, Any], current: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted names of the settings whose values differ between two ``model_dump(mode="json")`` configs."""
    changed = []
    for key in sorted(saved.keys() | current.keys()):
        old, new = saved.get(key), current.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            changed += config_changes(old, new, f"{prefix}{key}.")
        elif old != new:
            changed.append(prefix + key)
    return changed


def _weights(policy: Policy) -> dict[str, torch.Tensor]:
    """What a checkpoint stores of the model: every weight (full), or the adapter's parameters (LoRA: the
    frozen base is the model's name, loaded again on resume)."""
    if policy.adapter == "full":
        return policy.model.state_dict()
    return {name: parameter.detach() for name, parameter in policy.model.named_parameters() if parameter.requires_grad}


def _load_weights(policy: Policy, weights: dict[str, torch.Tensor], path: Path) -> None:
    expected = _weights(policy)
    missing, unexpected = expected.keys() - weights.keys(), weights.keys() - expected.keys()
    if missing or unexpected:
        raise CheckpointMismatchError(f"{path}: the checkpoint's weights are not this model's (missing "
                                      f"{sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
    for name, tensor in expected.items():
        if tensor.shape != weights[name].shape:
            raise CheckpointMismatchError(f"{path}: {name} has shape {tuple(weights[name].shape)} in the "
                                          f"checkpoint, {tuple(tensor.shape)} in this model")
    with torch.no_grad():
        for name, tensor in expected.items():  # state_dict tensors share the parameters' storage
            tensor.copy_(weights[name])


def _write(path: Path, write: Callable[[IO[bytes]], object]) -> dict[str, Any]:
    with path.open("xb") as file:
        write(file)
        file.flush()
        os.fsync(file.fileno())
    return {"bytes": path.stat().st_size, "sha256": _sha256(path)}


def _verify(path: Path, recorded: object) -> None:
    if not isinstance(recorded, dict):
        raise CorruptCheckpointError(f"{path.parent}: {MANIFEST} does not record {path.name}")
    if not path.is_file():
        raise CorruptCheckpointError(f"{path.parent}: {path.name} is missing")
    size = path.stat().st_size
    if size != recorded.get("bytes"):
        raise CorruptCheckpointError(f"{path.parent}: {path.name} has {size} bytes, {recorded.get('bytes')} written")
    if _sha256(path) != recorded.get("sha256"):
        raise CorruptCheckpointError(f"{path.parent}: {path.name} does not match its SHA-256 (damaged)")


def _load(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # whatever torch raises for bytes it cannot read
        raise CorruptCheckpointError(f"{path.parent}: {path.name} cannot be loaded ({error})") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _delete(path: Path) -> None:
    aside = path.with_name(f".old-{path.name}-{uuid.uuid4().hex[:8]}")
    os.rename(path, aside)  # out of the listing at once; the slow part happens out of sight
    shutil.rmtree(aside, ignore_errors=True)


def _remove_leftovers(folder: Path) -> None:
    for path in folder.iterdir():
        if path.name.startswith(_HIDDEN):
            shutil.rmtree(path, ignore_errors=True)
