"""What every task is: a ``Problem`` record, the ``Task`` interface, and the typed errors.

A task maps (split, index) to a problem deterministically, so that a node receiving a peer's group
can look the problem up in its own copy and recompute the reward from the completion text (the
generator's reward is advisory, docs/loss.md).
"""

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ftis.node.errors import UserError


@dataclass(frozen=True)
class Problem:
    dataset: str  # the task's name, e.g. "gsm8k" or "arith/d1-2/+-/n2/ood-d+1/seed0"; travels in TaskRef
    split: str
    index: int
    question: str  # the problem text, without the format instruction (see Task.prompt)
    answer: str  # the gold answer string the reward compares against
    solution: str = ""  # a worked solution, where the data set has one (few-shot examples show it)


@dataclass(frozen=True)
class PromptParts:
    """A problem's prompt in parts, so that solved examples can go before it (``prompts.Prompter``).

    ``text`` is the one-turn prompt (``Task.prompt``): the instruction, a blank line, the question. A prompt with
    solved examples says the instruction once, then each example's question, ``lead``, solved completion and
    ``gap``."""

    instruction: str  # how to answer, said once before the first question ("" when the format needs none)
    question: str  # this problem as it is asked
    lead: str  # what separates a question from its answer in a raw prompt with examples ("\n", or "" for "12+34=")
    gap: str = "\n\n"  # what follows an example's answer there: a blank line, or a newline after a one-line answer

    @property
    def text(self) -> str:
        return f"{self.instruction}\n\n{self.question}" if self.instruction else self.question


@runtime_checkable
class Task(Protocol):
    """A source of problems and their binary reward. Implementations hold no model and import nothing heavy
    until a split is loaded or a reward needs it."""

    @property
    def name(self) -> str:
        """The dataset name problems carry; two nodes agree on a problem only if their names are equal."""
        ...

    @property
    def splits(self) -> tuple[str, ...]:
        """The split names ``problem`` accepts."""
        ...

    def problem(self, split: str, index: int) -> Problem:
        """The problem at (split, index); the same on every node with the same task. Raises
        ``UnknownSplitError`` or ``ProblemIndexError``."""
        ...

    def size(self, split: str) -> int | None:
        """Number of problems in ``split``, or None when the split is unbounded (synthetic tasks)."""
        ...

    @property
    def answer_format(self) -> str:
        """The name of the answer format the reward checks ("tags", "plain"): evaluations report it."""
        ...

    @property
    def shot_split(self) -> str | None:
        """The split solved examples (few-shot) are taken from, or None when the task has none to spare."""
        ...

    def prompt(self, problem: Problem) -> str:
        """The one-turn text of the problem's prompt: ``prompt_parts(problem).text``."""
        ...

    def prompt_parts(self, problem: Problem) -> PromptParts:
        """The prompt's instruction and question (``prompts.Prompter`` renders them, raw or in a chat template)."""
        ...

    def solved(self, problem: Problem) -> str:
        """The completion a perfect model writes for ``problem``, in the answer format (its reward is 1): the
        answers of few-shot examples and of the warm-up's demonstrations."""
        ...

    def parse_answer(self, completion_text: str) -> str | None:
        """The answer a completion gives, or None when the completion breaks the task's format."""
        ...

    def reward(self, completion_text: str, gold: str) -> float:
        """1.0 if the completion follows the format and its answer equals ``gold``, else 0.0. Never raises
        on a malformed completion."""
        ...


class TaskError(UserError):
    """Base class of the errors this package raises."""


class UnknownTaskError(TaskError, LookupError):
    """``make_task`` was given a name or setting it does not know."""


class UnknownSplitError(TaskError, LookupError):
    """A split the task does not have."""


class ProblemIndexError(TaskError, IndexError):
    """An index outside the split (negative, or past its end)."""


class TaskDataError(TaskError, ValueError):
    """A data file or loaded row that does not have the expected shape."""


def check_index(dataset: str, split: str, index: int, size: int | None) -> None:
    """Refuse booleans, negatives and indices past the end (peers' task references are untrusted input)."""
    if isinstance(index, bool) or not isinstance(index, int):
        raise ProblemIndexError(f"{dataset}/{split}: index must be an int, got {type(index).__name__}")
    if index < 0 or (size is not None and index >= size):
        bound = "" if size is None else f" (size {size})"
        raise ProblemIndexError(f"{dataset}/{split}: no problem at index {index}{bound}")
