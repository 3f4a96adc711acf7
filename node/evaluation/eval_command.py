"""``ftis-node eval``: evaluate a model greedily on a task's split and print its accuracy.

    ftis-node eval --model runs/node/export --task gsm8k --data gsm8k_test.jsonl
    ftis-node eval --model Qwen/Qwen2.5-1.5B-Instruct --task math500 --device cuda --dtype bfloat16 --json
    ftis-node eval --model runs/node/export --config node.toml     # the task and [eval] of a node's config

The model is a tiny name, a hub id, a model or LoRA folder, or an export written by a node
(``DIR/export``: a folder with ``ftis_policy.json``, loaded with ``models.load_export``). Every option
left unset comes from ``--config`` when one is given (its task with its arithmetic settings and data
files, ``[eval]``, and ``[model]``'s dtype, device, seed and chat template), else from the config
defaults; without ``--config`` the whole split is evaluated (a synthetic split: a fixed set of 500).

While it runs, a progress bar on a terminal, or a plain line every tenth of the way otherwise, goes to
standard error, so ``--json`` leaves standard output to the result alone. Problems that are the
user's to fix (an unknown task, split or file, a missing model folder, a bad option) raise
``EvalCommandError`` with exit code 2; data or a model that fails to load, 1.
"""

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pydantic import ValidationError

from ftis.node.config import (
    ConfigError,
    GenerationConfig,
    ModelConfig,
    NodeConfig,
    TaskConfig,
    describe_validation_error,
    load_config,
)
from ftis.node.errors import FAILURE, USAGE, UserError
from ftis.node.tasks import TASKS, Task, TaskDataError, TaskError, UnknownSplitError, build_task

if TYPE_CHECKING:
    from ftis.node.evaluation.evaluation import EvalProgress, EvalResult
    from ftis.node.models import Policy
    from ftis.node.models.catalog import Prompting


class EvalCommandError(UserError):
    """What the command prints as ``error: …`` before exiting with ``exit_code``, which each raise chooses (``USAGE``
    or ``FAILURE``): a missing model or data file is the user's to fix, one that fails to load is a failure."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class EvalRequest:
    """The command's options as given (None: unset, see the module docstring)."""

    model: str
    task: str | None = None
    split: str | None = None
    data: Path | None = None
    limit: int | None = None
    max_new_tokens: int | None = None
    batch_size: int | None = None
    adapter: str | None = None
    chat_template: str | None = None
    device: str | None = None
    dtype: str | None = None
    config: Path | None = None
    records: Path | None = None  # write one JSON line per problem here
    as_json: bool = False


@dataclass(frozen=True)
class _Plan:
    task: Task
    split: str
    limit: int | None
    max_new_tokens: int
    batch_size: int
    model: ModelConfig
    few_shot: int
    generation: GenerationConfig
    prompting: "Prompting | None" = None  # a known model's own prompt settings, used where none was given


def run_eval(request: EvalRequest, echo: Callable[[str], None], echo_err: Callable[[str], None]) -> "EvalResult":
    """Load, evaluate, print; raises ``EvalCommandError``."""
    from ftis.node.evaluation.evaluation import EvalError, eval_problems, evaluate
    from ftis.node.generation.factory import stop_strings
    from ftis.node.tasks.prompts import PromptError, policy_prompter

    plan = _plan(request)
    if plan.prompting is not None:
        echo_err(f"{request.model} on {plan.task.name} ({plan.task.answer_format}): its prompt settings, "
                 f"{plan.prompting.describe()} (options or --config choose others)")
    try:
        eval_problems(plan.task, plan.split, plan.limit)  # the data fails here, before a model is loaded
    except UnknownSplitError as error:
        raise EvalCommandError(str(error), USAGE) from None
    except OSError as error:
        raise EvalCommandError(f"cannot read {error.filename or 'the data'}: {error.strerror}", USAGE) from None
    except (TaskDataError, EvalError) as error:
        raise EvalCommandError(str(error), FAILURE) from None
    except Exception as error:  # loading a hub data set fails in many ways (network, cache, format)
        raise EvalCommandError(f"cannot load {plan.task.name}/{plan.split}: {error}", FAILURE) from None
    policy, policy_version = _load_model(request.model, request.adapter, plan.model)
    try:
        prompter = policy_prompter(policy, plan.task, chat_template=plan.model.chat_template, bos=plan.model.bos,
                                   few_shot=plan.few_shot)
    except PromptError as error:
        raise EvalCommandError(str(error), USAGE) from None
    chat = prompter.chat
    records = _open_records(request.records)  # before the evaluation: a bad path fails at once
    try:
        with _progress(f"{plan.task.name}/{plan.split}", echo_err) as progress:
            result = evaluate(policy, plan.task, plan.split, limit=plan.limit, batch_size=plan.batch_size,
                              max_new_tokens=plan.max_new_tokens, progress=progress,
                              keep_records=records is not None, prompter=prompter,
                              stop=stop_strings(policy, plan.generation))
        if records is not None:
            records.writelines(json.dumps(asdict(record)) + "\n" for record in result.records)
    finally:
        if records is not None:
            records.close()
    facts = {
        "model": request.model,
        "name": policy.name,
        "adapter": policy.adapter,
        "policy_version": policy_version,
        "chat_template": chat,
        "bos": prompter.bos,
        "few_shot": len(prompter.shots),
        "stop": list(plan.generation.stop),
        "max_new_tokens": plan.max_new_tokens,
        "batch_size": plan.batch_size,
        **{key: value for key, value in asdict(result).items() if key != "records"},
        "standard_error": result.standard_error,
    }
    if request.as_json:
        echo(json.dumps(facts, indent=2))
    else:
        echo(_text(facts))
    return result


def _plan(request: EvalRequest) -> _Plan:
    """The task, split and settings the request resolves to (module docstring)."""
    from ftis.node.evaluation.evaluation import EvalError, held_out_split

    try:
        base = load_config(request.config) if request.config is not None else NodeConfig()
    except ConfigError as error:
        raise EvalCommandError(str(error), USAGE) from None
    name = request.task or (base.task.name if request.config is not None else None)
    if name is None:
        raise EvalCommandError("name the task with --task (or give a node's --config)", USAGE)
    if name not in TASKS:
        raise EvalCommandError(f"unknown task {name!r}; choose from {', '.join(TASKS)}", USAGE)
    same_task = request.config is not None and name == base.task.name  # else the config's files are another task's
    data_files = dict(base.task.data_files) if same_task else {}
    split = request.split or base.eval.split
    if request.data is not None:
        if name == "arithmetic":
            raise EvalCommandError("arithmetic is generated, not read: --data does not apply to it", USAGE)
        if not request.data.is_file():
            raise EvalCommandError(f"no such data file: {request.data}", USAGE)
        split = split or "test"
        data_files[split] = str(request.data)
    task_config = _validated(TaskConfig, {"name": name, "data_files": data_files,
                                          "arithmetic": base.task.arithmetic if same_task else {},
                                          "few_shot": base.task.few_shot if same_task else 0}, "task")
    try:
        task = build_task(task_config)
        split = split or held_out_split(task)
    except (TaskError, EvalError, TypeError) as error:  # TypeError: an arithmetic setting it does not know
        raise EvalCommandError(str(error), USAGE) from None
    prompting = _known_prompting(request, name, task)
    overrides = {"dtype": request.dtype, "device": request.device,
                 "chat_template": request.chat_template or (prompting and prompting.chat_template)}
    model = _validated(ModelConfig, base.model.model_dump() | {k: v for k, v in overrides.items() if v}, "model")
    if request.adapter not in (None, "full", "lora"):
        raise EvalCommandError(f"--adapter must be full or lora, not {request.adapter!r}", USAGE)
    generation = base.generation
    if prompting is not None:
        generation = generation.model_copy(update={"stop": list(prompting.stop)})
    return _Plan(
        task=task,
        split=split,
        limit=request.limit if request.limit is not None else (base.eval.limit if request.config else None),
        max_new_tokens=(request.max_new_tokens or (prompting and prompting.max_new_tokens) or base.eval.max_new_tokens
                        or generation.max_new_tokens),
        batch_size=request.batch_size or base.eval.batch_size or generation.batch_size,
        model=model,
        few_shot=prompting.few_shot if prompting is not None else task_config.few_shot,
        generation=generation,
        prompting=prompting,
    )


def _known_prompting(request: EvalRequest, task_name: str, task: Task) -> "Prompting | None":
    """A known real model's prompt settings for this task (``models/catalog.py``), where no ``--config`` gives the
    node's own; None otherwise."""
    from ftis.node.models.catalog import CATALOG

    if request.config is not None or request.model not in CATALOG or Path(request.model).expanduser().exists():
        return None
    return CATALOG[request.model].prompting_for(task_name, task.answer_format)


def _validated(section: type, data: dict[str, Any], label: str) -> Any:
    try:
        return section.model_validate(data)
    except ValidationError as error:
        raise EvalCommandError(describe_validation_error(error, label), USAGE) from None


def _load_model(name: str, adapter: str | None, settings: ModelConfig) -> tuple["Policy", int | None]:
    """The policy, and its policy version when it is a node's export. A folder with ``ftis_policy.json``
    is an export (loaded as it was saved); a LoRA folder keeps its adapter unless ``adapter`` is full."""
    from ftis.node.models import ModelLoadError, NotAModelError, UnknownModelError, load_export, load_policy
    from ftis.node.models.export import POLICY_FILE, read_export_record

    path = Path(name).expanduser()
    try:
        if (path / POLICY_FILE).is_file():
            version = read_export_record(path).get("policy_version")
            return load_export(path, dtype=settings.dtype, device=settings.device, seed=settings.seed), version
        adapter = adapter or ("lora" if (path / "adapter_config.json").is_file() else "full")
        policy = load_policy(name, adapter=adapter, dtype=settings.dtype, device=settings.device,
                             seed=settings.seed, revision=settings.revision)
        return policy, None
    except (NotAModelError, UnknownModelError) as error:
        raise EvalCommandError(str(error), USAGE) from None
    except ModelLoadError as error:
        raise EvalCommandError(str(error), FAILURE) from None
    except Exception as error:  # a corrupt folder, a device torch does not have, ...: say what, not where
        raise EvalCommandError(f"cannot load {name}: {type(error).__name__}: {error}", FAILURE) from None


@contextmanager
def _progress(label: str, echo_err: Callable[[str], None]) -> Iterator["EvalProgress"]:
    """A progress callback: a rich bar on a terminal (standard error), else a line every tenth of the way."""
    from rich import progress as rich_progress
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        yield _tenths(label, echo_err)
        return
    columns = (rich_progress.TextColumn("eval {task.description}"), rich_progress.BarColumn(),
               rich_progress.MofNCompleteColumn(), rich_progress.TextColumn("accuracy {task.fields[accuracy]}"),
               rich_progress.TimeElapsedColumn(), rich_progress.TimeRemainingColumn())
    with rich_progress.Progress(*columns, console=console) as bar:
        task_id = bar.add_task(label, total=None, accuracy="-")

        def update(done: int, total: int, correct: int) -> None:
            bar.update(task_id, completed=done, total=total, accuracy=f"{correct / done:.1%}")

        yield update


def _tenths(label: str, echo_err: Callable[[str], None]) -> "EvalProgress":
    """Progress as plain lines (logs, pipes): one each time another tenth of the problems is done."""
    shown = 0

    def line(done: int, total: int, correct: int) -> None:
        nonlocal shown
        if done * 10 // total > shown:
            shown = done * 10 // total
            echo_err(f"eval {label}: {done}/{total} ({done / total:.0%}), accuracy so far {correct / done:.1%}")

    return line


def _open_records(path: Path | None) -> IO[str] | None:
    if path is None:
        return None
    try:
        return path.open("w", encoding="utf-8")
    except OSError as error:
        raise EvalCommandError(f"cannot write {path}: {error.strerror}", USAGE) from None


def _text(facts: dict[str, Any]) -> str:
    version = "" if facts["policy_version"] is None else f", policy version {facts['policy_version']}"
    rows = [
        ("model", f"{facts['model']} ({facts['adapter']}{version})"),
        ("task", f"{facts['dataset']}, split {facts['split']}: {facts['total']} problems"),
        ("accuracy", f"{facts['accuracy']:.1%} ± {facts['standard_error']:.1%} ({facts['correct']}/{facts['total']})"),
        *((skill, f"{right / seen:.1%} ({right}/{seen})") for skill, (right, seen) in facts["by_skill"].items()),
        ("format", f"{facts['in_format']}/{facts['total']} ({facts['format_valid']:.1%}) completions give an answer "
                   f"in the task's format ({facts['answer_format']})"),
        ("truncated", f"{facts['truncated']:.1%} reached max_new_tokens ({facts['max_new_tokens']})"),
        ("length", f"{facts['mean_completion_tokens']:.1f} tokens per completion"),
        ("speed", f"{facts['tokens_per_s']:.0f} tokens/s, {facts['seconds']:.1f} s"),
    ]
    return "\n".join(f"{label:<10}{value}" for label, value in rows)
