"""make_task's one table, the Task interface every task meets, and a light import.

Run: python -m pytest tests/test_tasks_registry.py -q
"""

import subprocess
import sys
from pathlib import Path

import pytest

from ftis.node.tasks import (
    TASKS,
    ArithmeticSettings,
    ArithmeticTask,
    GSM8KTask,
    Math500Task,
    Task,
    UnknownTaskError,
    make_task,
)

FIXTURES = Path(__file__).parent / "fixtures" / "tasks"


def test_the_table_names_every_task():
    assert set(TASKS) == {"gsm8k", "math500", "arithmetic"}
    assert isinstance(make_task("gsm8k"), GSM8KTask)  # offline: nothing loads until a split is used
    assert isinstance(make_task("math500", timeout_seconds=2), Math500Task)
    arithmetic = make_task("arithmetic", max_digits=3, operations="+", seed=4)
    assert isinstance(arithmetic, ArithmeticTask)
    assert arithmetic.settings == ArithmeticSettings(max_digits=3, operations="+", seed=4)


def test_unknown_names_and_settings_are_refused():
    with pytest.raises(UnknownTaskError, match="gsm8k, math500, arithmetic"):
        make_task("gsm9k")
    with pytest.raises(TypeError, match="digits"):
        make_task("arithmetic", digits=3)
    with pytest.raises(TypeError, match="path"):
        make_task("gsm8k", path="x.jsonl")


@pytest.mark.parametrize(
    ("name", "settings", "split"),
    [("gsm8k", {"data_files": {"test": FIXTURES / "gsm8k_sample.jsonl"}}, "test"),
     ("math500", {"data_files": {"test": FIXTURES / "math500_sample.jsonl"}}, "test"),
     ("arithmetic", {}, "train"),
     ("arithmetic", {"format": "tags"}, "ood")],
)  # fmt: skip
def test_every_task_meets_the_interface(name, settings, split):
    task = make_task(name, **settings)
    assert isinstance(task, Task)
    problem = task.problem(split, 0)
    assert problem.dataset == task.name and (problem.split, problem.index) == (split, 0)
    assert problem.question in task.prompt(problem)
    assert task.reward("", problem.answer) == 0.0
    assert task.parse_answer("") is None


def test_importing_the_package_loads_nothing_heavy():
    code = ("import sys, ftis.node.tasks; "
            "print(sorted(m for m in ('torch', 'datasets', 'math_verify', 'sympy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
