"""MATH-500: loading (local JSONL and the hub path, offline) and the math_verify reward on equivalent
forms, wrong answers, malformed completions and garbage; a failing comparison gives 0, never raises; a tower of
powers, which math_verify's timeout cannot stop, is refused before it is evaluated.

Run: python -m pytest tests/test_tasks_math500.py -q
"""

import threading
import time
from pathlib import Path

import pytest

from ftis.node.tasks import Math500Task, UnknownSplitError
from ftis.node.tasks import math500 as math500_module
from ftis.node.tasks.math500 import equivalent, power_height
from ftis.node.tasks.tags import tagged_completion

FIXTURE = Path(__file__).parent / "fixtures" / "tasks" / "math500_sample.jsonl"
HALF = "\\frac{1}{2}"


@pytest.fixture
def task() -> Math500Task:
    return Math500Task(data_files={"test": FIXTURE})


def answer(text: str) -> str:
    return tagged_completion("Add the quarters.", text)


def test_jsonl_loading(task):
    assert task.size("test") == 4
    problem = task.problem("test", 1)
    assert (problem.dataset, problem.split, problem.index) == ("math500", "test", 1)
    assert problem.question.startswith("Convert the point")
    assert problem.answer == "\\left( 3, \\frac{\\pi}{2} \\right)"
    with pytest.raises(UnknownSplitError):
        task.problem("train", 0)


def test_hub_loading_calls_load_dataset_by_name(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return datasets.Dataset.from_list([{"problem": "Half of one?", "answer": HALF, "level": 1}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    task = Math500Task()
    assert task.splits == ("test",)
    assert task.problem("test", 0).answer == HALF
    assert calls == [(("HuggingFaceH4/MATH-500",), {"split": "test"})]


# (answer inside the tags, gold, reward, why)
CASES = [
    (HALF, HALF, 1.0, "same LaTeX"),
    ("0.5", HALF, 1.0, "decimal"),
    ("\\dfrac12", HALF, 1.0, "dfrac without braces"),
    ("1/2", HALF, 1.0, "slash"),
    ("\\frac{2}{4}", HALF, 1.0, "unreduced"),
    ("\\boxed{\\frac{1}{2}}", HALF, 1.0, "boxed inside the answer"),
    ("The answer is \\boxed{0.5}", HALF, 1.0, "boxed after words"),
    ("$\\frac{1}{2}$", HALF, 1.0, "dollar delimiters"),
    ("\\(\\frac{1}{2}\\)", HALF, 1.0, "paren delimiters"),
    ("\\sqrt{52}", "2\\sqrt{13}", 1.0, "unsimplified radical"),
    ("(3, \\pi/2)", "\\left( 3, \\frac{\\pi}{2} \\right)", 1.0, "tuple"),
    ("x = 5", "5", 1.0, "assignment"),
    ("\\frac{1}{3}", HALF, 0.0, "wrong"),
    ("\\boxed{\\frac{1}{3}}", HALF, 0.0, "wrong, boxed"),
    ("(\\frac{\\pi}{2}, 3)", "\\left( 3, \\frac{\\pi}{2} \\right)", 0.0, "tuple out of order"),
    ("7.2111", "2\\sqrt{13}", 0.0, "rounded decimal"),
    ("\\frac{1}{2} and \\frac{1}{3}", HALF, 0.0, "two answers"),
    ("\\frac{", HALF, 0.0, "garbage: unclosed frac"),
    ("}{", HALF, 0.0, "garbage: braces"),
    ("\\boxed{", HALF, 0.0, "garbage: unclosed box"),
    ("$$$", HALF, 0.0, "garbage: dollars"),
    ("\\", HALF, 0.0, "garbage: backslash"),
    ("9" * 1000, HALF, 0.0, "over-long answer"),
]


@pytest.mark.parametrize(("given", "gold", "reward", "why"), CASES, ids=[case[3] for case in CASES])
def test_reward(task, given, gold, reward, why):
    assert task.reward(answer(given), gold) == reward, why


@pytest.mark.parametrize(
    "completion",
    ["0.5", "\\boxed{0.5}", "<answer>0.5</answer>", answer("0.5") + " ok", "<think></think><answer></answer>", ""],
)
def test_reward_is_zero_when_the_format_breaks(task, completion):
    assert task.reward(completion, HALF) == 0.0


def test_every_fixture_gold_rewards_its_own_answer(task):
    for index in range(task.size("test")):
        gold = task.problem("test", index).answer
        assert task.reward(answer(gold), gold) == 1.0
        assert task.reward(answer(f"\\boxed{{{gold}}}"), gold) == 1.0


@pytest.mark.parametrize("failure", ["timeout", "error"])
def test_a_failing_math_verify_gives_zero(monkeypatch, task, failure):
    import math_verify
    from math_verify.errors import TimeoutException

    def broken_parse(*args, **kwargs):
        raise TimeoutException("slow") if failure == "timeout" else RuntimeError("boom")

    math500_module._parse.cache_clear()
    monkeypatch.setattr(math_verify, "parse", broken_parse)
    try:
        assert task.reward(answer("0.5"), HALF) == 0.0
    finally:
        math500_module._parse.cache_clear()


def test_reward_works_off_the_main_thread(task):
    # math_verify's timeouts use signal.alarm, which raises ValueError off the main thread; the task
    # runs without them there instead of failing.
    results = []
    worker = threading.Thread(target=lambda: results.append(task.reward(answer("0.5"), HALF)))
    worker.start()
    worker.join(timeout=60)
    assert results == [1.0]


@pytest.mark.parametrize("tower", ["10^{10^{10^{10}}}", "10^{10^{10^{10^{10}}}}", "e^{e^{e^{100}}}"])
def test_a_tower_of_powers_is_refused_before_math_verify_evaluates_it(tower):
    # Against a gold that holds a variable, math_verify compares numerically: it evaluated 10^{10^{10^{10}}} for 41 s
    # and 8.5 GB, past its own signal-based timeout (5 s), which cannot interrupt one long operation in mpmath.
    started = time.monotonic()
    assert not equivalent("x^2+2x+1", tower) and not equivalent(tower, "x^2+2x+1")  # a peer's gold, trusted, too
    assert time.monotonic() - started < 2.0
    assert equivalent("1024", "2^{10}") and equivalent("65536", "2^{2^{4}}")  # two levels are still read


@pytest.mark.parametrize(("text", "height"), [("x", 0), ("x^2+2x+1", 1), ("(x^2)^3", 1), ("2^{\\frac{1}{2}}", 1),
                                              ("10^{10^{10}}", 2), ("a^b^c", 2), ("10^{\\sqrt{10^{10^{10}}}}", 3)])
def test_power_height(text, height):
    assert power_height(text) == height
