"""MATH-500 (the paper's out-of-distribution evaluation): competition problems with LaTeX answers.

Rows come from ``datasets.load_dataset("HuggingFaceH4/MATH-500", split="test")`` or a local JSONL file
with the fields ``problem`` and ``answer`` (the gold, LaTeX without delimiters, e.g. ``\\frac{14}{3}``), and
``solution`` where the file has it (few-shot examples show it; MATH-500 has no train split of its own, so solved
examples need a local "train" file).

Reward (binary): the completion follows the tag format (``tags.py``) and ``math_verify`` finds its
answer equivalent to the gold (``\\frac{1}{2}``, ``0.5``, ``\\dfrac12``, ``\\boxed{1/2}`` all match 1/2).
math_verify bounds its work with ``signal.alarm``, which only the main thread may use: off the main
thread the comparison runs without its timeout, so over-long answers are refused before parsing.
A comparison that fails in any way gives 0, never an exception.
"""

import functools
import re
import threading
from collections.abc import Mapping
from pathlib import Path

from ftis.node.tasks.base import Problem
from ftis.node.tasks.sources import HubDataset, SplitTable, TaggedTableTask
from ftis.node.tasks.tags import tagged_answer

MATH500_HUB = HubDataset(path="HuggingFaceH4/MATH-500", config=None, splits=("test",))
ANSWER_HINT = "a simplified exact expression in LaTeX, without dollar signs"
MAX_ANSWER_CHARS = 512  # the longest MATH-500 gold has 53; sympy on long input is what times out
DEFAULT_TIMEOUT_SECONDS = 5
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")


def as_latex(text: str) -> str:
    """``text`` with math delimiters math_verify can find: kept if it has some, else ``$…$`` around it."""
    if _UNESCAPED_DOLLAR.search(text) or any(mark in text for mark in ("\\boxed", "\\(", "\\[")):
        return text
    return f"${text}$"


def equivalent(gold: str, answer: str, timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS) -> bool:
    """Whether math_verify judges ``answer`` equal to ``gold``; False on any failure or timeout."""
    from math_verify.errors import TimeoutException  # a BaseException: `except Exception` misses it

    if not answer.strip() or len(answer) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return False  # a peer's answer, or a gold it gave (trusted answers), past what sympy parses in time
    on_main_thread = threading.current_thread() is threading.main_thread()
    timeout = timeout_seconds if on_main_thread else None
    try:
        expected = _parse(gold, timeout)
        given = _parse(answer, timeout)
        return bool(expected and given and _verify(expected, given, timeout))
    except (Exception, TimeoutException):
        return False


@functools.lru_cache(maxsize=4096)
def _parse(text: str, timeout: int | None) -> tuple:
    # Cached: the gold is parsed once per group, not once per completion. A tuple, so callers
    # cannot mutate the cached value.
    from math_verify import parse

    return tuple(parse(as_latex(text), parsing_timeout=timeout, raise_on_error=False))


def _verify(expected: tuple, given: tuple, timeout: int | None) -> bool:
    from math_verify import verify

    return verify(list(expected), list(given), timeout_seconds=timeout, raise_on_error=False)


class Math500Task(TaggedTableTask):
    """MATH-500 by hub name (split "test") or from ``data_files`` (split name -> JSONL path)."""

    name = "math500"
    answer_hint = ANSWER_HINT

    def __init__(
        self,
        data_files: Mapping[str, str | Path] | None = None,
        hub: HubDataset = MATH500_HUB,
        timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS,
    ):
        self._table = SplitTable(self.name, hub, data_files, ("problem", "answer"), self._to_problem)
        self.timeout_seconds = timeout_seconds

    def reward(self, completion_text: str, gold: str) -> float:
        answer = tagged_answer(completion_text)
        return 1.0 if answer is not None and equivalent(gold, answer, self.timeout_seconds) else 0.0

    def _to_problem(self, row: dict, split: str, index: int) -> Problem:
        solution = row.get("solution")
        return Problem(self.name, split, index, row["problem"], row["answer"].strip(),
                       solution.strip() if isinstance(solution, str) else "")
