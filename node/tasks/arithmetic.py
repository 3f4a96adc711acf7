"""Synthetic arithmetic for tiny CPU models: "12+34=" -> "46".

Problems are a pure function of (settings, split, index): every node with the same settings builds
the same problem, which is what lets a receiver recompute a peer's reward. The randomness is
BLAKE2b over a text key (not ``random``), so it is the same on every platform and Python version.

Splits:
- "train", "dev" and "test": the same distribution, and disjoint: a hash of (seed, problem) puts each
  possible problem in one of ``TEST_SHARE`` buckets: bucket 0 is test, bucket 1 is dev (what a warm-up
  stops on, so that test stays untouched), the rest train; a split draws candidates until one lands in
  its own bucket.
- "ood": unseen problems, as configured: operands with ``ood_extra_digits`` more digits than
  ``max_digits``, and/or at least one operation from ``ood_operations`` (held out of train and test).

Operands: ``operand_draw = "length"`` draws a digit count uniformly in [min_digits, max_digits], then a
number of that length, so 1-digit operands are as common as 2-digit ones; ``"value"`` draws every number
with min_digits…max_digits digits with equal probability (1–2 digits: 0…99, each pair of operands equally
likely), so the split is the problem space itself, without a pile of repeated short problems.

Skills (``skill``): an addition-only problem either needs a carry in some column or not ("carry",
"no-carry"); evaluations report accuracy per skill, and a warm-up can leave carries out
(``warmup/data.py``) to make a specialist that lacks them.

Settings: ``ArithmeticSettings``, the fields of ``ArithmeticConfig`` in ``node/config/arithmetic.py`` (a node's
``[task.arithmetic]``), where each one is declared, described and checked.

Formats: "plain" (the prompt is "12+34=", the completion is the number and then the end; reward 1 iff
the stripped completion is exactly the gold integer) or "tags" (the paper's format, checked like GSM8K).
"""

import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pydantic import ValidationError

from ftis.node.config import ArithmeticConfig, describe_validation_error
from ftis.node.tasks.base import Problem, PromptParts, TaskError, UnknownSplitError, check_index
from ftis.node.tasks.numeric import tagged_number_reward
from ftis.node.tasks.tags import tag_parts, tagged_answer, tagged_completion

SPLITS = ("train", "dev", "test", "ood")
TEST_SHARE = 10  # one problem in ten belongs to the test split, one in ten to dev
MAX_ATTEMPTS = 10_000  # candidates a split may draw before the problem space is declared too small
_INTEGER = re.compile(r"-?\d+")


class ArithmeticSettings(ArithmeticConfig):
    """The task's settings: ``ArithmeticConfig`` (``node/config/arithmetic.py`` declares, describes and checks
    each one), refused as the task refuses anything: an unknown name is a TypeError, a bad value a ``TaskError``."""

    def __init__(self, **settings: object) -> None:
        unknown = sorted(settings.keys() - ArithmeticConfig.model_fields.keys())
        if unknown:
            raise TypeError(f"arithmetic: no setting {', '.join(map(repr, unknown))} "
                            f"(it has {', '.join(ArithmeticConfig.model_fields)})")
        try:
            super().__init__(**settings)
        except ValidationError as error:
            raise TaskError(describe_validation_error(error, "arithmetic")) from None

    @property
    def dataset_name(self) -> str:
        """Every setting that changes a problem or its reward, so peers with other settings never match."""
        ood = f"ood-d+{self.ood_extra_digits}" + (f"-{self.ood_operations}" if self.ood_operations else "")
        tags = "/tags" if self.format == "tags" else ""
        digits = f"d{self.min_digits}-{self.max_digits}" + ("v" if self.operand_draw == "value" else "")
        return f"arith/{digits}/{self.operations}/n{self.operands}/{ood}/seed{self.seed}{tags}"


@dataclass(frozen=True)
class AnswerFormat:
    prompt: Callable[[str], PromptParts]  # the expression ("12+34") -> what the model is asked
    parse_answer: Callable[[str], str | None]
    reward: Callable[[str, str], float]  # (completion_text, gold) -> 0.0 or 1.0
    solved: Callable[[Problem], str]  # the completion a perfect model writes


def _plain_answer(completion_text: str) -> str | None:
    text = completion_text.strip()
    return text if _INTEGER.fullmatch(text) else None


def _plain_reward(completion_text: str, gold: str) -> float:
    return 1.0 if completion_text.strip() == gold.strip() else 0.0  # "046" or "46.0" is not exactly 46


# The tags format "thinks" by writing the sum out, then answers.
FORMATS: dict[str, AnswerFormat] = {
    # one sum a line ("68+91=159\n77+6=83\n…"): a model that ends its answer at the line ends it with "\n" alone
    "plain": AnswerFormat(lambda question: PromptParts("", f"{question}=", "", "\n"), _plain_answer, _plain_reward,
                          lambda problem: problem.answer),
    "tags": AnswerFormat(
        lambda question: tag_parts(f"What is {question}?", "an integer"), tagged_answer, tagged_number_reward,
        lambda problem: tagged_completion(f"{problem.question}={problem.answer}", problem.answer),
    ),
}
SHOT_SPLIT = "dev"  # solved examples come from dev: never trained on, never in the held-out test split


def _draws(key: str) -> Iterator[int]:
    """An endless deterministic stream of 128-bit integers for ``key``."""
    counter = 0
    while True:
        digest = hashlib.blake2b(f"{key}#{counter}".encode(), digest_size=16).digest()
        yield int.from_bytes(digest, "little")
        counter += 1


def _operand(draws: Iterator[int], min_digits: int, max_digits: int, by_value: bool) -> int:
    if by_value:  # every number with min_digits…max_digits digits equally likely
        low = 0 if min_digits == 1 else 10 ** (min_digits - 1)
        return low + next(draws) % (10**max_digits - low)
    digits = min_digits + next(draws) % (max_digits - min_digits + 1)
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return low + next(draws) % (10**digits - low)


def needs_carry(numbers: list[int]) -> bool:
    """Whether adding ``numbers`` (non-negative) carries in some column."""
    carry, rest = 0, list(numbers)
    while any(rest) or carry:
        column = carry + sum(n % 10 for n in rest)
        if column >= 10:
            return True
        carry, rest = column // 10, [n // 10 for n in rest]
    return False


def expression(numbers: list[int], operations: list[str]) -> str:
    """ "12+34" for ([12, 34], ["+"])."""
    return "".join(f"{n}{op}" for n, op in zip(numbers, operations, strict=False)) + str(numbers[-1])


def evaluate(numbers: list[int], operations: list[str]) -> int:
    """The value of numbers[0] op[0] numbers[1] …, with * before + and - (no eval)."""
    terms, signs = [numbers[0]], []
    for op, number in zip(operations, numbers[1:], strict=True):
        if op == "*":
            terms[-1] *= number
        else:
            terms.append(number)
            signs.append(op)
    total = terms[0]
    for sign, term in zip(signs, terms[1:], strict=True):
        total = total + term if sign == "+" else total - term
    return total


class ArithmeticTask:
    """Synthetic arithmetic problems; unbounded splits "train", "dev", "test", "ood" (``size`` is None)."""

    splits = SPLITS

    def __init__(self, settings: ArithmeticSettings | None = None):
        self.settings = settings or ArithmeticSettings()

    @classmethod
    def from_settings(cls, **settings) -> "ArithmeticTask":
        return cls(ArithmeticSettings(**settings))

    @property
    def name(self) -> str:
        return self.settings.dataset_name

    def size(self, split: str) -> int | None:
        self._check_split(split)
        return None

    def problem(self, split: str, index: int) -> Problem:
        self._check_split(split)
        check_index(self.name, split, index, None)
        numbers, operations = self._draw(split, index)
        return Problem(self.name, split, index, expression(numbers, operations), str(evaluate(numbers, operations)))

    @property
    def answer_format(self) -> str:
        return self.settings.format

    @property
    def shot_split(self) -> str:
        return SHOT_SPLIT

    def prompt(self, problem: Problem) -> str:
        return self.prompt_parts(problem).text

    def prompt_parts(self, problem: Problem) -> PromptParts:
        return FORMATS[self.settings.format].prompt(problem.question)

    def solved(self, problem: Problem) -> str:
        return FORMATS[self.settings.format].solved(problem)

    def skill(self, problem: Problem) -> str | None:
        """"carry" or "no-carry" for a problem that only adds; None for any other (see the module docstring)."""
        if "-" in problem.question or "*" in problem.question:
            return None
        return "carry" if needs_carry([int(part) for part in problem.question.split("+")]) else "no-carry"

    def parse_answer(self, completion_text: str) -> str | None:
        return FORMATS[self.settings.format].parse_answer(completion_text)

    def reward(self, completion_text: str, gold: str) -> float:
        return FORMATS[self.settings.format].reward(completion_text, gold)

    def _check_split(self, split: str) -> None:
        if split not in SPLITS:
            raise UnknownSplitError(f"{self.name}: no split {split!r} (has {', '.join(SPLITS)})")

    def _draw(self, split: str, index: int) -> tuple[list[int], list[str]]:
        s = self.settings
        for attempt in range(MAX_ATTEMPTS):
            draws = _draws(f"{s.seed}/{split}/{index}/{attempt}")
            if split == "ood":
                # Disjoint from train/test by construction: longer operands or a held-out operation.
                extra = s.ood_extra_digits
                digits = (s.max_digits + 1, s.max_digits + extra) if extra else (s.min_digits, s.max_digits)
                return self._candidate(draws, digits, s.operations + s.ood_operations, s.ood_operations)
            numbers, operations = self._candidate(draws, (s.min_digits, s.max_digits), s.operations, "")
            if self._split_of(numbers, operations) == split:
                return numbers, operations
        raise TaskError(f"{self.name}: no {split} problem in {MAX_ATTEMPTS} draws; the problem space is too small")

    def _candidate(self, draws: Iterator[int], digits: tuple[int, int], ops: str, must_use: str):
        """Operands with digits in [digits[0], digits[1]], operations from ``ops``, at least one of
        ``must_use`` when it is not empty."""
        by_value = self.settings.operand_draw == "value"
        numbers = [_operand(draws, *digits, by_value) for _ in range(self.settings.operands)]
        operations = [ops[next(draws) % len(ops)] for _ in range(self.settings.operands - 1)]
        if must_use and not set(operations) & set(must_use):
            operations[next(draws) % len(operations)] = must_use[next(draws) % len(must_use)]
        return numbers, operations

    def _split_of(self, numbers: list[int], operations: list[str]) -> str:
        """The split a train/dev/test candidate belongs to (see the module docstring)."""
        text = expression(numbers, operations)
        digest = hashlib.blake2b(f"{self.settings.seed}|{text}".encode(), digest_size=8).digest()
        bucket = int.from_bytes(digest, "little") % TEST_SHARE
        return "test" if bucket == 0 else "dev" if bucket == 1 else "train"
