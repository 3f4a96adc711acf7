"""The paper's tag format and the numeric answer reader that GSM8K and tagged arithmetic share.

Run: python -m pytest tests/test_tasks_format.py -q
"""

from fractions import Fraction

import pytest

from ftis.node.tasks.numeric import same_number, tagged_number_reward, the_number
from ftis.node.tasks.tags import tag_prompt, tagged_answer, tagged_completion

GOOD = "<think> 3 boxes of 6 </think>\n<answer> 18 </answer>"


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        (GOOD, "18"),
        ("<think>x</think><answer>18</answer>", "18"),  # no whitespace needed
        ("\n  <think>\nmulti\nline\n</think>\n\n<answer>\n18\n</answer>\n\n", "18"),  # whitespace around tags
        (tagged_completion("anything", "18"), "18"),
        ("<answer>18</answer>", None),  # no think block
        ("<think> x </think> 18", None),  # no answer tags
        ("<think> x </think> <answer> 18", None),  # answer never closed
        ("<think> x <answer> 18 </answer>", None),  # think never closed
        ("<think> x </think> <answer> 17 </answer> <answer> 18 </answer>", None),  # two answer tags
        ("<think> x </think> <answer> 18 </answer> So 18.", None),  # text after </answer>
        ("<think> x </think> <answer> 18 </answer><|endoftext|>", None),  # a special token's text is text
        ("Sure! <think> x </think> <answer> 18 </answer>", None),  # text before <think>
        ("<think> x </think> so: <answer> 18 </answer>", None),  # text between the blocks
        ("<answer> 18 </answer> <think> x </think>", None),  # wrong order
        ("<think> a </think> <think> b </think> <answer> 18 </answer>", None),  # two think blocks
        ("<think> x </think> <answer>   </answer>", None),  # empty answer
        ("<think> x <answer> 1 </answer> </think> <answer> 18 </answer>", None),  # nested tags
        ("", None),
    ],
)
def test_tagged_answer(completion, expected):
    assert tagged_answer(completion) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("18", 18), ("18.0", 18), ("$18", 18), ("18.", 18), ("\\$18", 18), ("18 dollars", 18), ("x = 18", 18),
        ("1,000", 1000), ("$1,234,567.50", Fraction("1234567.5")), ("-7", -7), ("\u22127", -7), (".5", Fraction(1, 2)),
        ("3.50", Fraction(7, 2)), ("50%", 50),
        ("", None), ("eighteen", None),
        ("18 or 20", None), ("5-3", None), ("1/2", None), ("\\frac{1}{2}", None),  # two numbers: ambiguous
        ("1,0000", None), ("1,2", None), ("1.2.3", None),  # malformed groupings are no number
    ],
)  # fmt: skip
def test_the_number(text, expected):
    assert the_number(text) == expected


def test_same_number_needs_a_number_on_both_sides():
    assert same_number("18.00", "18")
    assert not same_number("18", "19")
    assert not same_number("18", "")
    assert not same_number("", "18")


def test_tagged_number_reward():
    assert tagged_number_reward(GOOD, "18") == 1.0
    assert tagged_number_reward(GOOD, "19") == 0.0
    assert tagged_number_reward("18", "18") == 0.0  # right number, no format


def test_tag_prompt_names_the_format_and_holds_the_question():
    prompt = tag_prompt("  What is 2+2?  ", "an integer")
    for piece in ("<think>", "</think>", "<answer>", "</answer>", "an integer", "Problem: What is 2+2?"):
        assert piece in prompt
    assert not prompt.rstrip().endswith("<think>")  # the completion opens the think block itself
