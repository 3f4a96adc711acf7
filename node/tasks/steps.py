"""The arithmetic a completion writes on its way to the answer, checked: a correct answer reached through a false
equation ("2+2=5") teaches the false step as much as the answer, so the training reward gives it nothing.

An equation is ``expression = number`` where the expression is numbers joined by ``+ - * / × ÷ x`` (at least one
operator), with parentheses, and the number after the sign is read as it is written (``1,000``, ``2.5``, ``-3``).
"$", "%" and words end an expression, so "20% of 50 = 10" and "x + 5 = 10" are not checked: only arithmetic the
text spells out in full is, and a check that cannot read an equation never fails it. Chains ("5 + 3 = 8 + 2 = 10")
are checked link by link. A value written with fewer decimals is compared at the precision written
("10/3 = 3.33" holds; "10/3 = 3.4" does not).

This judges what a completion teaches, not whether its answer is right: evaluations score answers alone
(``Task.reward``); training rewards, this node's own samples and its peers' alike, pass through it
(``zero_false_steps``) when ``[task] check_steps`` is on.
"""

import re
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from ftis.node.tasks.numeric import MAX_NUMBER_DIGITS

_NUMBER = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
# The value after an equals sign: a number as written, not followed by a digit, a decimal part, "%", "^" or "/" (a
# fraction, "= 1/2", is not read).
_VALUE = re.compile(rf"\s*(?P<value>-?{_NUMBER})(?![\d%^]|[.,]\d|\s*[/÷])")
_TOKEN = re.compile(rf"\s*(?:(?P<number>{_NUMBER})|(?P<symbol>[-+*/×÷x()]))")
_MINUS_SIGNS = str.maketrans({"\u2212": "-", "\u2013": "-"})
_EXPRESSION_CHARACTERS = frozenset("0123456789.,+-*/×÷x() \t")
# What may stand right before an expression that does not start with a space: the start, "=" (a chain), an opening
# bracket or a tag's ">". Anything else ("$", ":", "^", a letter) makes it part of something the check cannot read.
_OPENS = frozenset("=<>([{")
MAX_EXPRESSION_CHARS = 200  # an expression longer than this is not read (nor checked)
MAX_DEPTH = 16  # parentheses nested in one expression: deeper is not arithmetic a completion writes
MAX_SIGNS = 256  # equals signs looked at in one completion: each costs at most MAX_EXPRESSION_CHARS of reading


def false_equation(text: str) -> str | None:
    """The first equation of ``text`` whose value is not its expression's, as written; None when every equation it
    can read holds (or it holds none). Linear in the text: each equals sign reads at most
    ``MAX_EXPRESSION_CHARS`` before it, and at most ``MAX_SIGNS`` are read."""
    text = text.translate(_MINUS_SIGNS)
    sign = -1
    for _ in range(MAX_SIGNS):
        sign = text.find("=", sign + 1)
        if sign < 0:
            break
        found = _VALUE.match(text, sign + 1)
        expression = _expression_before(text, sign)
        if found is None or expression is None:
            continue
        value = _evaluate(expression)
        if value is not None and not _same_at_precision(value, found["value"]):
            return f"{expression.strip()} = {found['value']}"
    return None


def _expression_before(text: str, sign: int) -> str | None:
    """The arithmetic right before the equals sign at ``sign``: None unless it is two operands or more, starts with a
    number or "(", and stands on its own (after a space, the start, "=", a bracket or ">")."""
    start, lowest = sign, max(0, sign - MAX_EXPRESSION_CHARS)
    while start > lowest and text[start - 1] in _EXPRESSION_CHARACTERS:
        start -= 1
    if start == lowest and start > 0 and text[start - 1] in _EXPRESSION_CHARACTERS:
        return None  # longer than it reads
    region = text[start:sign]
    if region[:1] in (",", ".") and region[1:2].isspace():
        region = region[1:]  # a clause's comma or full stop before it ("so, 3 + 5 = 8") is not part of it
    elif not (region[:1].isspace() or start == 0 or text[start - 1] in _OPENS):
        return None
    expression = region.lstrip(" \t")
    # one that starts with an operator or a variable ("-3 + 5", "x - 3 + 5") is the tail of a longer one
    if expression[:1].isdigit() or expression[:1] == "(":
        return expression if any(c in "+-*/×÷x" for c in expression) else None
    return None


def zero_false_steps(texts: Sequence[str], rewards: np.ndarray) -> int:
    """Set to 0 the reward of each rewarded completion of ``texts`` that writes a false equation (``rewards``, one
    per text, changed in place); how many were."""
    found = 0
    for c, text in enumerate(texts):
        if rewards[c] > 0 and false_equation(text) is not None:
            rewards[c] = 0.0
            found += 1
    return found


def _same_at_precision(value: Fraction, written: str) -> bool:
    number = written.replace(",", "")
    decimals = len(number.partition(".")[2])
    return abs(value - Fraction(number)) * 2 * 10**decimals <= 1  # within half a unit of the last digit written


def _evaluate(expression: str) -> Fraction | None:
    """The value of ``expression`` (numbers, + - * / × ÷ x, parentheses; * and / first), or None if it is not one
    (a division by zero, unbalanced parentheses, a number too long)."""
    tokens: list[str | Fraction] = []
    position = 0
    while position < len(expression):
        match = _TOKEN.match(expression, position)
        if match is None:
            if expression[position:].strip():
                return None
            break
        position = match.end()
        number = match["number"]
        if number is not None:
            digits = number.replace(",", "")
            if sum(c.isdigit() for c in digits) > MAX_NUMBER_DIGITS:
                return None
            tokens.append(Fraction(digits))
        else:
            tokens.append(match["symbol"])
    parser = _Parser(tokens)
    try:
        value = parser.sum()
    except (ZeroDivisionError, IndexError, ValueError):
        return None
    return value if parser.done else None


class _Parser:
    """Recursive descent over the tokens: sum := product (('+'|'-') product)*; product := factor (op factor)*;
    factor := number | '(' sum ')', parentheses nested at most ``MAX_DEPTH`` deep (deeper: not read)."""

    def __init__(self, tokens: list[str | Fraction]):
        self.tokens, self.at, self.depth = tokens, 0, 0

    @property
    def done(self) -> bool:
        return self.at == len(self.tokens)

    def sum(self) -> Fraction:
        value = self.product()
        while not self.done and self.tokens[self.at] in ("+", "-"):
            sign = self.tokens[self.at]
            self.at += 1
            right = self.product()
            value = value + right if sign == "+" else value - right
        return value

    def product(self) -> Fraction:
        value = self.factor()
        while not self.done and self.tokens[self.at] in ("*", "/", "×", "÷", "x"):
            operator = self.tokens[self.at]
            self.at += 1
            right = self.factor()
            value = value / right if operator in ("/", "÷") else value * right
        return value

    def factor(self) -> Fraction:
        token = self.tokens[self.at]
        self.at += 1
        if isinstance(token, Fraction):
            return token
        if token == "(":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ValueError("parentheses nested too deep")
            value = self.sum()
            if self.done or self.tokens[self.at] != ")":
                raise ValueError("unbalanced parentheses")
            self.at += 1
            self.depth -= 1
            return value
        raise ValueError(f"unexpected {token!r}")
