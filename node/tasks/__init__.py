"""Tasks and rewards: the problems a node trains and evaluates on, and the binary reward it recomputes
for its own and its peers' completions. Pure Python: no torch; ``datasets`` and ``math_verify`` load
only when a hub split is read or a MATH-500 answer is compared.

Files:
- ``base.py``        ``Problem``, the ``Task`` interface (typing.Protocol), the typed errors.
- ``tags.py``        the paper's answer format ``<think> … </think><answer> … </answer>``: prompt and check.
- ``numeric.py``     numeric answers: exactly one number, compared exactly ("18.0" = "$18" = 18).
- ``sources.py``     rows from a local JSONL file or ``datasets.load_dataset``, loaded per split on first use.
- ``gsm8k.py``       GSM8K (train / in-distribution): gold number after ``####``, numeric reward.
- ``math500.py``     MATH-500 (out-of-distribution evaluation): answers compared with math_verify.
- ``arithmetic.py``  synthetic arithmetic for tiny CPU models: difficulty settings, train/test/ood splits.
- ``steps.py``       the equations a completion writes, checked: a right answer through a false step earns 0.
- ``gold.py``        the gold answer for a received group: own copy first, the peer's only if trusted.
- ``registry.py``    ``make_task(name, **settings)`` and the one table of task names; ``build_task`` from ``[task]``.
- ``eval_set.py``    the fixed problems an evaluation scores (and the warm-up's accuracy): the same everywhere.
- ``prompts.py``     the token ids a node conditions on for a problem, raw or in the chat template, and every
                     rendering a peer's group may carry (imports transformers' tokenizer base; not re-exported).
"""

from ftis.node.tasks.arithmetic import ArithmeticSettings, ArithmeticTask
from ftis.node.tasks.base import (
    Problem,
    ProblemIndexError,
    Task,
    TaskDataError,
    TaskError,
    UnknownSplitError,
    UnknownTaskError,
)
from ftis.node.tasks.gold import Gold, gold_answer, resolve_gold
from ftis.node.tasks.gsm8k import GSM8KTask
from ftis.node.tasks.math500 import Math500Task
from ftis.node.tasks.registry import TASKS, build_task, make_task

__all__ = [
    "TASKS",
    "ArithmeticSettings",
    "ArithmeticTask",
    "GSM8KTask",
    "Gold",
    "Math500Task",
    "Problem",
    "ProblemIndexError",
    "Task",
    "TaskDataError",
    "TaskError",
    "UnknownSplitError",
    "UnknownTaskError",
    "build_task",
    "gold_answer",
    "make_task",
    "resolve_gold",
]
