"""MATH-500 (the paper's out-of-distribution evaluation): competition problems with LaTeX answers.

Rows come from ``datasets.load_dataset("HuggingFaceH4/MATH-500", split="test")`` or a local JSONL file
with the fields ``problem`` and ``answer`` (the gold, LaTeX without delimiters, e.g. ``\\frac{14}{3}``), and
``solution`` where the file has it (few-shot examples show it; MATH-500 has no train split of its own, so solved
examples need a local "train" file).

Reward (binary): the completion follows the tag format (``tags.py``) and ``math_verify`` finds its
answer equivalent to the gold (``\\frac{1}{2}``, ``0.5``, ``\\dfrac12``, ``\\boxed{1/2}`` all match 1/2).
math_verify bounds its work with ``signal.alarm``, which only the main thread may use: off the main
thread the comparison runs without its timeout, so over-long answers are refused before parsing. Nor can the alarm
interrupt one long operation inside sympy or mpmath: comparing ``10^{10^{10^{10}}}`` with a gold that holds a
variable evaluates the tower for 40 s and 8 GB. So an answer (or a gold a peer gave) with more than
``MAX_POWER_HEIGHT`` powers stacked in its exponents is refused before parsing too.
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
# Powers stacked in exponents an answer may hold: 10^{10^{10}} is compared within the timeout (5.5 s, 0.1 GB,
# measured on the 2-core VM), one level more runs past it; no MATH-500 answer stacks even two.
MAX_POWER_HEIGHT = 2
_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")


def as_latex(text: str) -> str:
    """``text`` with math delimiters math_verify can find: kept if it has some, else ``$…$`` around it."""
    if _UNESCAPED_DOLLAR.search(text) or any(mark in text for mark in ("\\boxed", "\\(", "\\[")):
        return text
    return f"${text}$"


def equivalent(gold: str, answer: str, timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS) -> bool:
    """Whether math_verify judges ``answer`` equal to ``gold``; False on any failure or timeout."""
    from math_verify.errors import TimeoutException  # a BaseException: `except Exception` misses it

    if not answer.strip() or any(len(text) > MAX_ANSWER_CHARS or power_height(text) > MAX_POWER_HEIGHT
                                 for text in (answer, gold)):
        return False  # a peer's answer, or a gold it gave (trusted answers), past what sympy compares in time
    on_main_thread = threading.current_thread() is threading.main_thread()
    timeout = timeout_seconds if on_main_thread else None
    try:
        expected = _parse(gold, timeout)
        given = _parse(answer, timeout)
        return bool(expected and given and _verify(expected, given, timeout))
    except (Exception, TimeoutException):
        return False


def power_height(text: str) -> int:
    """How many powers stand on one another in the LaTeX ``text``: 0 in ``x``, 1 in ``x^2`` and ``(x^2)^3``, 2 in
    ``10^{10^{10}}``, 3 in ``10^{10^{10^{10}}}``. An exponent is the braced group or the one token after ``^``."""
    height, _ = _height_until(text, 0, None)
    return height


def _height_until(text: str, at: int, close: str | None) -> tuple[int, int]:
    """The highest tower in ``text`` from ``at`` to the brace that closes it (``close``; None: the end), and where
    that brace is. Recursion follows the braces: at most ``MAX_ANSWER_CHARS`` deep."""
    height = 0
    while at < len(text) and text[at] != close:
        if text[at] == "{":
            inner, at = _height_until(text, at + 1, "}")
            height = max(height, inner)
        elif text[at] == "^":
            exponent, at = _exponent_height(text, at + 1)
            height = max(height, 1 + exponent)
            continue
        at += 1
    return height, at


def _exponent_height(text: str, at: int) -> tuple[int, int]:
    """The tower in the exponent that starts at ``at`` (a braced group, or one token: a command's letters or a
    character, then a chained ``^``, as in ``a^b^c``), and where the exponent ends."""
    while at < len(text) and text[at].isspace():
        at += 1
    if at < len(text) and text[at] == "{":
        height, at = _height_until(text, at + 1, "}")
        return height, at + 1
    if at < len(text) and text[at] == "\\":
        at += 1
        while at < len(text) and text[at].isalpha():
            at += 1
    else:
        at += 1
    if at < len(text) and text[at] == "^":
        chained, at = _exponent_height(text, at + 1)
        return 1 + chained, at
    return 0, at


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
