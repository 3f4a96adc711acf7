"""The warm-start cache: a warmed model is trained once per recipe and loaded from disk afterwards.

    warm = warm_start(WarmupSpec("tiny-small", seed=0, data=ArithmeticSettings(operations="+"),
                                 plan=WarmupPlan(steps=600, learning_rate=2e-3, batch_size=64)), echo=print)
    warm.path    # <cache>/warmup/tiny-small-<16 hex>: a full Hugging Face model folder (export_policy)
    warm.cached  # True when an earlier run (or another process) had already trained it

Where: ``cache_dir`` when given, else ``$FTIS_CACHE/warmup``, else ``~/.cache/ftis-node/warmup``.

The key is a hash of everything that decides the weights (and the recorded accuracy): the model name,
the seed, every arithmetic setting, the plan, and ``CODE_VERSION``, which changes whenever the training
code would produce other weights from the same recipe. Two recipes that differ anywhere never share a
folder; the same recipe always finds its folder.

Concurrency: a process takes an exclusive lock (``<key>.lock`` beside the folder, ``fcntl.flock``, freed
by the kernel if the process dies) before it trains; one that finds the lock taken waits, then finds
the folder complete and loads it. The folder is built under a temporary name (the export, then
``warmup.json`` with the recipe and the measured accuracy) and renamed into place in one step, so a
reader sees a complete folder or none.
"""

import fcntl
import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ftis.node.errors import UserError
from ftis.node.tasks import ArithmeticSettings, ArithmeticTask
from ftis.node.warmup.train import Progress, WarmupPlan, WarmupResult, supervised_warmup

CODE_VERSION = 3  # bump when train.py or data.py would make other weights from the same recipe
RECORD_FILE = "warmup.json"
CACHE_ENV = "FTIS_CACHE"


class WarmupCacheError(UserError, RuntimeError):
    """A cache folder that exists but cannot be used (unreadable record, or a recipe other than its key's)."""


@dataclass(frozen=True)
class WarmupSpec:
    """Everything that decides a warmed model."""

    model: str  # a built-in tiny model name
    seed: int  # the tiny model's initial weights and the order of the training problems
    data: ArithmeticSettings  # the data mix: digits, operations, operands, answer format, task seed
    plan: WarmupPlan

    def recipe(self) -> dict[str, Any]:
        """The spec as plain JSON values (what the key hashes and ``warmup.json`` records)."""
        return {"code_version": CODE_VERSION, "model": self.model, "seed": self.seed,
                "data": self.data.model_dump(), "plan": asdict(self.plan)}


@dataclass(frozen=True)
class WarmStart:
    path: Path  # the warmed model's folder: load it with load_policy(str(path), adapter=...)
    key: str
    cached: bool  # found on disk rather than trained by this call
    result: WarmupResult  # as measured when it was trained


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """The folder that holds one sub-folder per warmed model."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    base = os.environ.get(CACHE_ENV)
    return (Path(base).expanduser() if base else Path.home() / ".cache" / "ftis-node") / "warmup"


def cache_key(spec: WarmupSpec) -> str:
    """``<model>-<16 hex digits of SHA-256 over the recipe>``: readable, and different for any other recipe."""
    blob = json.dumps(spec.recipe(), sort_keys=True, separators=(",", ":"))
    return f"{spec.model}-{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def warm_start(
    spec: WarmupSpec, cache_dir: str | Path | None = None, echo: Callable[[str], None] | None = None
) -> WarmStart:
    """The warmed model for ``spec``: from the cache when it is there, else trained now and cached."""
    say = echo or (lambda line: None)
    root, key = cache_root(cache_dir), cache_key(spec)
    folder = root / key
    if (hit := _read(folder, spec)) is not None:
        say(f"warm start: cached {folder} ({_accuracy_line(hit)})")
        return WarmStart(folder, key, True, hit)
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive(root / f"{key}.lock", lambda: say(f"warm start: waiting for another process training {key}")):
        if (hit := _read(folder, spec)) is not None:  # it finished while we waited
            say(f"warm start: cached {folder} ({_accuracy_line(hit)})")
            return WarmStart(folder, key, True, hit)
        result = _train_and_store(spec, folder, say)
    say(f"warm start: {_accuracy_line(result)}; cached in {folder}")
    return WarmStart(folder, key, False, result)


def _train_and_store(spec: WarmupSpec, folder: Path, say: Callable[[str], None]) -> WarmupResult:
    from ftis.node.models import export_policy, load_policy

    say(f"warm start: training {spec.model} (seed {spec.seed}) on {spec.data.dataset_name} for "
        f"{spec.plan.steps} steps of {spec.plan.batch_size} problems, lr {spec.plan.learning_rate:g}")

    def report(progress: Progress) -> None:
        say(f"warm start: step {progress.step}/{progress.steps}  loss {progress.loss:.3f}  {progress.seconds:.1f} s")

    policy = load_policy(spec.model, seed=spec.seed)  # float32 on the CPU: tiny models train in seconds there
    result = supervised_warmup(policy, ArithmeticTask(spec.data), spec.plan, seed=spec.seed, on_progress=report)
    staging = folder.with_name(f".{folder.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        export_policy(policy, staging)
        record = {"recipe": spec.recipe(), "result": asdict(result), "created_at": time.time()}
        (staging / RECORD_FILE).write_text(json.dumps(record, indent=2) + "\n")
        os.rename(staging, folder)  # we hold the lock and the folder is absent: nothing to rename over
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return result


def is_cached(root: Path, key: str) -> bool:
    """Whether the cache ``root`` holds a finished warm start under ``key`` (``warm_start`` checks its record)."""
    return (root / key / RECORD_FILE).is_file()


def _read(folder: Path, spec: WarmupSpec) -> WarmupResult | None:
    """The recorded result when ``folder`` holds a complete warm start of ``spec``; None when absent."""
    path = folder / RECORD_FILE
    if not folder.exists():
        return None
    if not path.is_file():  # folders appear complete (one rename): this one was put there by something else
        raise WarmupCacheError(f"{folder} exists but holds no {RECORD_FILE}; delete it")
    try:
        record = json.loads(path.read_text())
        result = WarmupResult(**record["result"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise WarmupCacheError(f"{path} is not a readable warm-start record ({error}); delete {folder}") from error
    if record.get("recipe") != json.loads(json.dumps(spec.recipe())):  # through JSON: tuples become lists
        raise WarmupCacheError(f"{folder} holds another recipe than its key says; delete it")
    return result


@contextmanager
def _exclusive(lock_path: Path, on_wait: Callable[[], None]) -> Iterator[None]:
    with open(lock_path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _accuracy_line(result: WarmupResult) -> str:
    stop = ("" if result.dev_accuracy is None
            else f", stopped after {result.steps_taken} steps at dev {result.dev_accuracy:.1%}")
    return (f"greedy accuracy {result.accuracy_before:.1%} -> {result.accuracy_after:.1%} on "
            f"{result.eval_problems} held-out problems, {result.train_seconds:.1f} s of training{stop}")
