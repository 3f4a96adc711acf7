"""GSM8K: gold numbers, loading (local JSONL and the hub path, offline), prompt, and the reward on
correct, wrong and malformed completions.

Run: python -m pytest tests/test_tasks_gsm8k.py -q
"""

from pathlib import Path

import pytest

from ftis.node.tasks import GSM8KTask, ProblemIndexError, TaskDataError, UnknownSplitError
from ftis.node.tasks.gsm8k import gold_number
from ftis.node.tasks.tags import tagged_completion

FIXTURE = Path(__file__).parent / "fixtures" / "tasks" / "gsm8k_sample.jsonl"


@pytest.fixture
def task() -> GSM8KTask:
    return GSM8KTask(data_files={"test": FIXTURE})


def test_gold_number_reads_the_number_after_the_marks():
    assert gold_number("3 * 6 = 18\n#### 18") == "18"
    assert gold_number("#### 1,000") == "1000"
    assert gold_number("a #### b\n####  -7 ") == "-7"  # the last marks count
    with pytest.raises(TaskDataError):
        gold_number("the answer is 18")
    with pytest.raises(TaskDataError):
        gold_number("#### eighteen")


def test_jsonl_loading(task):
    assert task.splits == ("test",)
    assert task.size("test") == 4  # the blank line is skipped
    first = task.problem("test", 0)
    assert (first.dataset, first.split, first.index) == ("gsm8k", "test", 0)
    assert first.question.startswith("Ada has 3 boxes")
    assert [task.problem("test", i).answer for i in range(4)] == ["18", "1000", "-7", "3.5"]
    assert task.problem("test", 1) == GSM8KTask(data_files={"test": FIXTURE}).problem("test", 1)


@pytest.mark.parametrize("index", [-1, 4, 10**9, True])
def test_index_outside_the_split(task, index):
    with pytest.raises(ProblemIndexError):
        task.problem("test", index)


def test_unknown_split(task):
    with pytest.raises(UnknownSplitError):
        task.problem("train", 0)  # only the files given are splits


@pytest.mark.parametrize(
    ("line", "message"),
    [("not json", "not JSON"), ('{"question": "q"}', "'answer'"), ('["q", "a"]', "JSON object"),
     ('{"question": "q", "answer": "no marks"}', "####")],
)  # fmt: skip
def test_malformed_jsonl_is_a_typed_error(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "q", "answer": "#### 1"}\n' + line + "\n")
    task = GSM8KTask(data_files={"test": path})  # nothing is read until a split is used
    with pytest.raises(TaskDataError, match=message):
        task.size("test")


def test_hub_loading_calls_load_dataset_by_name(monkeypatch):
    import datasets

    calls = []

    def fake_load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return datasets.Dataset.from_list([
            {"question": "One plus one?", "answer": "1 + 1 = 2\n#### 2"},
            {"question": "Ten times a hundred?", "answer": "#### 1,000"},
        ])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    task = GSM8KTask()
    assert task.splits == ("train", "test")
    assert calls == []  # building the task is offline and instant
    assert task.problem("train", 1).answer == "1000"
    assert task.size("train") == 2
    assert calls == [(("openai/gsm8k", "main"), {"split": "train"})]  # loaded once, then kept
    task.problem("test", 0)
    assert calls[-1] == (("openai/gsm8k", "main"), {"split": "test"})


def test_prompt_is_the_instruction_and_the_question(task):
    problem = task.problem("test", 0)
    prompt = task.prompt(problem)
    assert problem.question in prompt
    assert "<think>" in prompt and "<answer>" in prompt and "number" in prompt


def answer(text: str) -> str:
    return tagged_completion("Let me work it out.", text)


# (completion, gold, reward, why)
CASES = [
    (answer("18"), "18", 1.0, "exact"),
    (answer("18.0"), "18", 1.0, "decimal form of an integer"),
    (answer("$18"), "18", 1.0, "currency sign"),
    (answer("18."), "18", 1.0, "sentence full stop"),
    (answer("18 pencils"), "18", 1.0, "a unit after the one number"),
    (answer("1,000"), "1000", 1.0, "thousands separator"),
    (answer("1000"), "1000", 1.0, "plain"),
    (answer("1000.00"), "1000", 1.0, "trailing zeros"),
    (answer("-7"), "-7", 1.0, "negative"),
    (answer("3.5"), "3.5", 1.0, "decimal gold"),
    (answer("3.50"), "3.5", 1.0, "decimal gold, trailing zero"),
    (answer("18") + "  \n", "18", 1.0, "trailing whitespace"),
    (answer("17"), "18", 0.0, "wrong number"),
    (answer("7"), "-7", 0.0, "sign dropped"),
    (answer("3"), "3.5", 0.0, "decimal truncated"),
    (answer("1,00"), "100", 0.0, "bad grouping"),
    (answer("17 or 18"), "18", 0.0, "two numbers"),
    (answer("eighteen"), "18", 0.0, "a word, no number"),
    ("18", "18", 0.0, "missing tags"),
    ("<answer>18</answer>", "18", 0.0, "missing think block"),
    ("<think>x</think> 18", "18", 0.0, "missing answer tags"),
    ("<think>x</think><answer>17</answer><answer>18</answer>", "18", 0.0, "two answer tags"),
    (answer("18") + " Done!", "18", 0.0, "text after </answer>"),
    (answer("18")[: -len("</answer>")], "18", 0.0, "truncated before </answer>"),
    ("", "18", 0.0, "empty"),
]


@pytest.mark.parametrize(("completion", "gold", "reward", "why"), CASES, ids=[case[3] for case in CASES])
def test_reward(task, completion, gold, reward, why):
    assert task.reward(completion, gold) == reward, why


def test_parse_answer(task):
    assert task.parse_answer(answer(" $1,000 ")) == "$1,000"
    assert task.parse_answer("no tags") is None


def test_every_fixture_gold_rewards_its_own_answer(task):
    for index in range(task.size("test")):
        gold = task.problem("test", index).answer
        assert task.reward(answer(gold), gold) == 1.0
