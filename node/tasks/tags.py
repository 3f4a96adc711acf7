"""The paper's answer format: reasoning inside ``<think> … </think>``, then the answer inside
``<answer> … </answer>``, and nothing after it.

The check follows the paper's released code (exactly one answer tag, the completion ends with
``</answer>``) and the R1-style format reward ``^<think>.*?</think>\\s*<answer>.*?</answer>$``:
each of the four tags appears exactly once, in that order, with only whitespace before ``<think>``,
between ``</think>`` and ``<answer>``, and after ``</answer>``.
"""

import re

from ftis.node.tasks.base import PromptParts

THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE = "<think>", "</think>", "<answer>", "</answer>"
_TAGS = (THINK_OPEN, THINK_CLOSE, ANSWER_OPEN, ANSWER_CLOSE)
_TAGGED = re.compile(r"\s*<think>.*?</think>\s*<answer>(?P<answer>.*?)</answer>\s*", re.DOTALL)


def tag_prompt(question: str, answer_hint: str) -> str:
    """The instruction plus the question: the raw text of the user's turn (``tag_parts(...).text``)."""
    return tag_parts(question, answer_hint).text


def tag_parts(question: str, answer_hint: str) -> PromptParts:
    """The instruction and the question.

    ``answer_hint`` says what goes inside the answer tags ("a single number, without units").
    The prompt does not end with ``<think>``: the completion must open the think block itself.
    """
    instruction = (
        "Solve the following problem. First think it through step by step inside <think> </think> tags, "
        "then write only the final answer inside <answer> </answer> tags, and stop. Use this format:\n"
        "<think> your reasoning </think>\n"
        "<answer> the final answer </answer>\n"
        f"The final answer is {answer_hint}."
    )
    return PromptParts(instruction, f"Problem: {question.strip()}", "\n")


def tagged_answer(completion_text: str) -> str | None:
    """The stripped text inside the answer tags, or None if the format does not hold or the answer is empty."""
    if any(completion_text.count(tag) != 1 for tag in _TAGS):
        return None
    match = _TAGGED.fullmatch(completion_text)
    if match is None:
        return None
    return match["answer"].strip() or None


def tagged_completion(think: str, answer: str) -> str:
    """A well-formed completion (for fakes, tests and checks of the parsers)."""
    return f"{THINK_OPEN} {think} {THINK_CLOSE}\n{ANSWER_OPEN} {answer} {ANSWER_CLOSE}"
