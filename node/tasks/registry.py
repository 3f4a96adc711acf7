"""``make_task(name, **settings)``: the one table that names the tasks; ``build_task`` makes the task a node's
``[task]`` names."""

from collections.abc import Callable

from ftis.node.config import TaskConfig
from ftis.node.tasks.arithmetic import ArithmeticTask
from ftis.node.tasks.base import Task, UnknownTaskError
from ftis.node.tasks.gsm8k import GSM8KTask
from ftis.node.tasks.math500 import Math500Task

TASKS: dict[str, Callable[..., Task]] = {
    "gsm8k": GSM8KTask,  # settings: data_files={"test": "gsm8k_test.jsonl"} (default: the hub)
    "math500": Math500Task,  # settings: data_files, timeout_seconds
    "arithmetic": ArithmeticTask.from_settings,  # settings: the fields of ArithmeticSettings
}


def make_task(name: str, **settings) -> Task:
    """The task called ``name`` built with ``settings`` (an unknown setting is a TypeError naming it)."""
    if name not in TASKS:
        raise UnknownTaskError(f"unknown task {name!r}; choose from {', '.join(TASKS)}")
    return TASKS[name](**settings)


def build_task(config: TaskConfig) -> Task:
    """The task ``config`` names, with its settings (arithmetic's knobs, local data files)."""
    settings: dict[str, object] = dict(config.arithmetic) if config.name == "arithmetic" else {}
    if config.data_files:
        settings["data_files"] = dict(config.data_files)
    return make_task(config.name, **settings)
