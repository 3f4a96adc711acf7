"""``[task.arithmetic]``: the synthetic arithmetic task's settings, and ``ArithmeticOverride``, any of them laid over
the task's for the warm-up's data mix."""

from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from ftis.node.config.base import MAX_SEED, Section, partial_of

ARITHMETIC_OPERATIONS = "+-*"
MAX_ARITHMETIC_DIGITS = 30  # operands stay below 2**100, the range of one 128-bit draw (negligible modulo bias)
MAX_ARITHMETIC_OPERANDS = 16


def _operations(value: str) -> str:
    if len(set(value)) != len(value) or not set(value) <= set(ARITHMETIC_OPERATIONS):
        raise ValueError(f"must be distinct characters of {ARITHMETIC_OPERATIONS!r}, got {value!r}")
    return value


_Operations = Annotated[str, AfterValidator(_operations)]  # a type, so that partial_of keeps the check


class ArithmeticConfig(Section):
    """The synthetic arithmetic task (``tasks/arithmetic.py``): its problems are a pure function of these
    settings, the split and the index, and its dataset name spells them, so peers with other settings never
    match a problem."""

    min_digits: int = Field(1, ge=1, le=MAX_ARITHMETIC_DIGITS,
                            description="Fewest digits of an operand in train, dev and test.")
    max_digits: int = Field(2, ge=1, le=MAX_ARITHMETIC_DIGITS,
                            description="Most digits of an operand in train, dev and test.")
    operations: _Operations = Field(
        "+-", min_length=1, description='The operations of train, dev and test: distinct characters of "+-*".'
    )
    operands: int = Field(
        2, ge=2, le=MAX_ARITHMETIC_OPERANDS, description='Numbers per problem ("1+2*3" has 3); * before + and -.'
    )
    ood_extra_digits: int = Field(
        1, ge=0, le=MAX_ARITHMETIC_DIGITS,
        description="OOD operands have max_digits+1 … max_digits+ood_extra_digits digits; 0: as train's."
    )
    ood_operations: _Operations = Field(
        "", description="Operations held out of train, dev and test; every OOD problem uses at least one of them."
    )
    seed: int = Field(0, ge=0, le=MAX_SEED, description="Seeds the problems and which split each one falls in.")
    format: Literal["plain", "tags"] = Field(  # the names of tasks/arithmetic.py's FORMATS (a test checks)
        "plain", description='"plain": "12+34=" answered "46" and the end; "tags": the paper\'s '
        "<think> … </think><answer> … </answer> format, checked as GSM8K's."
    )
    operand_draw: Literal["length", "value"] = Field(
        "length", description='"length": a digit count uniform in [min_digits, max_digits], then a number of that '
        'length; "value": every number with min_digits…max_digits digits equally likely.'
    )

    @model_validator(mode="after")
    def _consistent(self) -> "ArithmeticConfig":
        if self.min_digits > self.max_digits or self.max_digits + self.ood_extra_digits > MAX_ARITHMETIC_DIGITS:
            raise ValueError(f"need min_digits <= max_digits, max_digits + ood_extra_digits <= "
                             f"{MAX_ARITHMETIC_DIGITS}; got {self.min_digits}, {self.max_digits}, "
                             f"{self.ood_extra_digits}")
        if set(self.ood_operations) & set(self.operations):
            raise ValueError("ood_operations must be held out, i.e. not among operations")
        if self.ood_extra_digits == 0 and not self.ood_operations:
            raise ValueError("the ood split must differ: set ood_extra_digits > 0 or ood_operations")
        return self

    def overridden(self, override: Mapping[str, object]) -> "ArithmeticConfig":
        """These settings with ``override``'s laid over them, checked again (the warm-up's data mix)."""
        return ArithmeticConfig.model_validate({**self.model_dump(), **override})


# Any of ArithmeticConfig's settings: the warm-up's data mix, laid over [task].arithmetic.
ArithmeticOverride = partial_of(ArithmeticConfig, "ArithmeticOverride")
