"""Numeric answers (GSM8K, arithmetic in the tag format): an answer holds exactly one number, compared
with the gold exactly, as a fraction.

"18", "18.0", "$18", "18." and "18 dollars" all read as 18; "1,000" reads as 1000 (commas only
between groups of three digits); "-7" is negative. An answer with two numbers ("18 or 20", "5-3",
"1/2") is ambiguous and reads as no number: a reward for it would reward hedging. So does a number of more than
``MAX_NUMBER_DIGITS`` digits (a peer's completion can hold any text).
"""

import re
from fractions import Fraction

from ftis.node.tasks.tags import tagged_answer

# A number neither glued to a digit, dot or comma before it nor followed by a digit or by a dot or
# comma and a digit ("1,0000" and "1.2.3" hold no number): an optional minus, digits with optional
# comma groups of three, an optional decimal part; or a bare decimal part (".5").
_NUMBER = re.compile(r"(?<![\d.,])-?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)(?!\d|[.,]\d)")
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-"})  # "−" and "–" as typed by models
# The most digits a number may have and still be read: far above any answer of these tasks (GSM8K's longest gold has
# 8), far below Python's limit on converting digits to an int (4,300: beyond it ``Fraction`` raises), and small
# enough that comparing two such numbers costs nothing. A longer run of digits reads as no number.
MAX_NUMBER_DIGITS = 64


def the_number(text: str) -> Fraction | None:
    """The one number in ``text``, or None when it holds none or several."""
    found = _NUMBER.findall(text.translate(_MINUS_SIGNS))
    if len(found) != 1:
        return None
    number = found[0].replace(",", "")
    if sum(character.isdigit() for character in number) > MAX_NUMBER_DIGITS:
        return None
    return Fraction(number)


def same_number(answer: str, gold: str) -> bool:
    """Whether ``answer`` holds exactly one number and it equals the one number in ``gold``."""
    value, expected = the_number(answer), the_number(gold)
    return value is not None and expected is not None and value == expected


def tagged_number_reward(completion_text: str, gold: str) -> float:
    """The GSM8K reward: 1.0 iff the tag format holds and the answer's number equals the gold number."""
    answer = tagged_answer(completion_text)
    return 1.0 if answer is not None and same_number(answer, gold) else 0.0
