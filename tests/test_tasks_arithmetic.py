"""Synthetic arithmetic: deterministic problems, correct answers, settings respected, train/test
disjoint, the OOD split different as configured, dataset names that spell the settings, and the
reward in both formats.

Run: python -m pytest tests/test_tasks_arithmetic.py -q
"""

from typing import get_args

import pytest

from ftis.node.config import ArithmeticConfig
from ftis.node.tasks import (
    ArithmeticSettings,
    ArithmeticTask,
    Problem,
    ProblemIndexError,
    TaskError,
    UnknownSplitError,
    arithmetic,
)
from ftis.node.tasks.arithmetic import FORMATS, evaluate
from ftis.node.tasks.tags import tagged_completion


def problems(task: ArithmeticTask, split: str, count: int) -> list[str]:
    return [task.problem(split, index).question for index in range(count)]


def operands(question: str) -> list[str]:
    for op in "+-*":
        question = question.replace(op, " ")
    return question.split()


def test_problems_are_pinned():
    # Peers recompute each other's gold answers from (settings, split, index): generation must give
    # the same problems on every machine and every Python version. A change here breaks the swarm.
    task = ArithmeticTask()
    assert task.name == "arith/d1-2/+-/n2/ood-d+1/seed0"
    assert [(p.question, p.answer) for p in map(lambda i: task.problem("train", i), range(3))] == [
        ("51+93", "144"), ("4+12", "16"), ("51-73", "-22")
    ]
    assert task.problem("test", 0).question == "7+7"
    assert task.problem("ood", 0).question == "406+877"


def test_generation_is_deterministic_and_seeded():
    settings = ArithmeticSettings(max_digits=3, operations="+-*", operands=3)
    assert problems(ArithmeticTask(settings), "train", 50) == problems(ArithmeticTask(settings), "train", 50)
    other_seed = ArithmeticTask(ArithmeticSettings(max_digits=3, operations="+-*", operands=3, seed=1))
    assert problems(other_seed, "train", 50) != problems(ArithmeticTask(settings), "train", 50)


def test_answers_are_right_with_precedence():
    assert evaluate([2, 3, 4], ["+", "*"]) == 14
    assert evaluate([2, 3, 4], ["*", "-"]) == 2
    assert evaluate([10, 2, 3, 4], ["-", "*", "+"]) == 8
    task = ArithmeticTask(ArithmeticSettings(max_digits=3, operations="+-*", operands=4))
    for split in task.splits:
        for index in range(200):
            problem = task.problem(split, index)
            assert int(problem.answer) == eval(problem.question), problem  # the test may use eval; the code does not


def test_train_and_test_follow_the_settings_and_are_disjoint():
    task = ArithmeticTask(ArithmeticSettings(min_digits=1, max_digits=2, operations="+-"))
    train, test = set(problems(task, "train", 3000)), set(problems(task, "test", 300))
    assert not train & test
    assert len(test) > 200  # varied, not one problem repeated
    for question in train | test:
        assert set(question) <= set("0123456789+-")
        assert all(1 <= len(number) <= 2 for number in operands(question))


def test_ood_has_more_digits():
    task = ArithmeticTask(ArithmeticSettings(min_digits=1, max_digits=2, ood_extra_digits=2))
    for question in problems(task, "ood", 200):
        assert all(3 <= len(number) <= 4 for number in operands(question))


def test_ood_holds_out_an_operation():
    settings = ArithmeticSettings(operations="+-", operands=3, ood_extra_digits=0, ood_operations="*")
    task = ArithmeticTask(settings)
    assert all("*" not in question for question in problems(task, "train", 300) + problems(task, "test", 100))
    ood = problems(task, "ood", 300)
    assert all("*" in question for question in ood)
    assert any("+" in question or "-" in question for question in ood)  # mixed with the seen operations
    assert all(len(number) <= 2 for question in ood for number in operands(question))


@pytest.mark.parametrize(
    "settings",
    [dict(min_digits=0), dict(min_digits=3, max_digits=2), dict(operations=""), dict(operations="+/"),
     dict(operations="++"), dict(ood_operations="+"), dict(ood_extra_digits=0), dict(operands=1),
     dict(max_digits=30), dict(format="json")],
)  # fmt: skip
def test_bad_settings_are_refused(settings):
    with pytest.raises(TaskError):
        ArithmeticSettings(**settings)


def test_the_config_names_exactly_the_answer_formats_of_the_table():
    assert set(get_args(ArithmeticConfig.model_fields["format"].annotation)) == set(FORMATS)


def test_settings_are_the_config_s_fields_and_refuse_an_unknown_one():
    assert ArithmeticSettings() == ArithmeticSettings(**ArithmeticConfig().model_dump())
    with pytest.raises(TypeError, match="max_digts"):
        ArithmeticSettings(max_digts=3)


def test_names_spell_the_settings():
    names = {
        ArithmeticSettings().dataset_name,
        ArithmeticSettings(seed=1).dataset_name,
        ArithmeticSettings(max_digits=3).dataset_name,
        ArithmeticSettings(operations="+").dataset_name,
        ArithmeticSettings(operands=3).dataset_name,
        ArithmeticSettings(ood_extra_digits=2).dataset_name,
        ArithmeticSettings(ood_operations="*").dataset_name,
        ArithmeticSettings(format="tags").dataset_name,
    }
    assert len(names) == 8
    assert ArithmeticSettings(operations="+-", ood_operations="*", ood_extra_digits=0, format="tags").dataset_name \
        == "arith/d1-2/+-/n2/ood-d+0-*/seed0/tags"
    problem = ArithmeticTask(ArithmeticSettings(seed=3)).problem("train", 0)
    assert problem.dataset == "arith/d1-2/+-/n2/ood-d+1/seed3"


def test_splits_are_unbounded_and_checked():
    task = ArithmeticTask()
    assert task.splits == ("train", "dev", "test", "ood")
    assert task.size("train") is None
    with pytest.raises(UnknownSplitError):
        task.problem("validation", 0)
    with pytest.raises(UnknownSplitError):
        task.size("validation")
    for index in (-1, True, 1.0):
        with pytest.raises(ProblemIndexError):
            task.problem("train", index)
    assert task.problem("train", 10**12).answer  # any non-negative index


def test_a_problem_space_too_small_for_a_test_split_is_an_error(monkeypatch):
    tiny = ArithmeticTask(ArithmeticSettings(min_digits=1, max_digits=1, operations="*"))
    assert tiny.problem("test", 0).answer  # 100 problems, about ten of them in test: enough
    monkeypatch.setattr(arithmetic, "TEST_SHARE", 10**30)  # now (almost surely) none is in test
    with pytest.raises(TaskError, match="too small"):
        tiny.problem("test", 0)


# (completion, gold, reward, why)
PLAIN_CASES = [
    ("46", "46", 1.0, "exact"),
    (" 46\n", "46", 1.0, "surrounding whitespace"),
    ("-22", "-22", 1.0, "negative"),
    ("45", "46", 0.0, "wrong"),
    ("22", "-22", 0.0, "sign dropped"),
    ("046", "46", 0.0, "leading zero is not exactly the integer"),
    ("46.0", "46", 0.0, "decimal form"),
    ("46 apples", "46", 0.0, "extra text"),
    ("46=46", "46", 0.0, "extra text"),
    ("4 6", "46", 0.0, "inner space"),
    ("", "46", 0.0, "empty"),
]


@pytest.mark.parametrize(("completion", "gold", "reward", "why"), PLAIN_CASES, ids=[c[3] for c in PLAIN_CASES])
def test_plain_reward(completion, gold, reward, why):
    assert ArithmeticTask().reward(completion, gold) == reward, why


def test_plain_prompt_and_parse():
    task = ArithmeticTask()
    problem = task.problem("train", 0)
    assert task.prompt(problem) == "51+93="
    assert task.parse_answer(" 144\n") == "144"
    assert task.parse_answer("144!") is None
    assert task.reward(problem.answer, problem.answer) == 1.0


def test_tags_format_uses_the_gsm8k_checker():
    task = ArithmeticTask(ArithmeticSettings(format="tags"))
    problem = task.problem("train", 0)
    prompt = task.prompt(problem)
    assert "51+93" in prompt and "<answer>" in prompt
    assert task.reward(tagged_completion("add", "144"), "144") == 1.0
    assert task.reward(tagged_completion("add", "144.0"), "144") == 1.0
    assert task.reward(tagged_completion("add", "145"), "144") == 0.0
    assert task.reward("144", "144") == 0.0  # the plain form is malformed here
    assert task.parse_answer(tagged_completion("add", "144")) == "144"


def test_dev_is_a_third_split_disjoint_from_train_and_test():
    task = ArithmeticTask(ArithmeticSettings(operations="+", operand_draw="value"))
    seen = {split: set(problems(task, split, 400)) for split in ("train", "dev", "test")}
    assert not seen["dev"] & seen["train"] and not seen["dev"] & seen["test"] and not seen["train"] & seen["test"]
    assert task.problem("dev", 5) == task.problem("dev", 5)


def test_operands_drawn_by_value_make_every_pair_equally_likely():
    by_length = ArithmeticTask(ArithmeticSettings(operations="+"))
    by_value = ArithmeticTask(ArithmeticSettings(operations="+", operand_draw="value"))
    assert by_value.name == "arith/d1-2v/+/n2/ood-d+1/seed0" != by_length.name  # peers with other draws never match

    def one_digit_share(task: ArithmeticTask) -> float:
        return sum(all(len(n) == 1 for n in operands(q)) for q in problems(task, "train", 2000)) / 2000

    assert one_digit_share(by_length) == pytest.approx(0.25, abs=0.04)  # lengths uniform: a quarter 1+1 digits
    assert one_digit_share(by_value) == pytest.approx(0.01, abs=0.01)  # values uniform: 100 of 10,000 pairs
    assert all(0 <= int(n) <= 99 for q in problems(by_value, "train", 500) for n in operands(q))
    assert all(len(n) == 3 for q in problems(by_value, "ood", 100) for n in operands(q))
    with pytest.raises(TaskError, match="operand_draw"):
        ArithmeticSettings(operand_draw="uniform")


@pytest.mark.parametrize(("question", "skill"), [
    ("47+38", "carry"),  # ones column: 7 + 8 = 15
    ("50+60", "carry"),  # tens column only
    ("23+45", "no-carry"),
    ("0+9", "no-carry"),
    ("99+1", "carry"),
    ("1+2+3", "no-carry"),
    ("5+5+0", "carry"),
    ("47-38", None),  # not an addition: no skill named
    ("4*3", None),
])
def test_skill_says_whether_an_addition_carries(question, skill):
    task = ArithmeticTask()
    problem = Problem("d", "test", 0, question, "0")
    assert task.skill(problem) == skill
