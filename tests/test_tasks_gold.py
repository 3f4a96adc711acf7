"""The gold answer for a received group: the node's own copy when the task reference matches a problem
it has, the peer's advisory answer only when trusted, otherwise none (the group is unusable).

Run: python -m pytest tests/test_tasks_gold.py -q
"""

from pathlib import Path

import pytest

from ftis.node.tasks import ArithmeticSettings, ArithmeticTask, Gold, GSM8KTask, gold_answer, resolve_gold

FIXTURE = Path(__file__).parent / "fixtures" / "tasks" / "gsm8k_sample.jsonl"


@pytest.fixture
def gsm8k() -> GSM8KTask:
    return GSM8KTask(data_files={"test": FIXTURE})


@pytest.mark.parametrize("trust", [False, True])
def test_own_copy_is_preferred_over_the_batch(gsm8k, trust):
    # The peer claims 999 for problem 0; our copy says 18, and ours wins whether or not peers are trusted.
    problem = gsm8k.problem("test", 0)  # returned too: the receiver checks the group's prompt against it
    assert resolve_gold(gsm8k, "gsm8k", "test", 0, "999", trust) == Gold("18", "own", False, problem)
    assert resolve_gold(gsm8k, "gsm8k", "test", 0, " 18 ", trust) == Gold("18", "own", True, problem)


@pytest.mark.parametrize(
    ("dataset", "split", "index"),
    [("math500", "test", 0),  # another data set
     ("gsm8k", "train", 0),  # a split we do not have
     ("gsm8k", "test", 4),  # past the end of our copy
     ("gsm8k", "test", -1)],
)  # fmt: skip
def test_without_an_own_copy_the_batch_answer_needs_trust(gsm8k, dataset, split, index):
    assert gold_answer(gsm8k, dataset, split, index, "42", trust_peer_answers=False) is None
    assert resolve_gold(gsm8k, dataset, split, index, "42", False) == Gold(None, "none")
    assert gold_answer(gsm8k, dataset, split, index, " 42\n", trust_peer_answers=True) == "42"
    assert resolve_gold(gsm8k, dataset, split, index, "42", True) == Gold("42", "peer")


def test_an_empty_batch_answer_is_never_a_gold(gsm8k):
    assert gold_answer(gsm8k, "math500", "test", 0, "  ", trust_peer_answers=True) is None


def test_synthetic_tasks_match_only_with_the_same_settings():
    ours = ArithmeticTask(ArithmeticSettings(max_digits=2, seed=0))
    same = ArithmeticTask(ArithmeticSettings(max_digits=2, seed=0))
    other = ArithmeticTask(ArithmeticSettings(max_digits=3, seed=0))
    theirs = same.problem("train", 7)
    assert resolve_gold(ours, theirs.dataset, "train", 7, theirs.answer, False) == Gold(
        theirs.answer, "own", True, theirs)
    # A peer with other settings: its (split, index) names a different problem, so no own copy.
    foreign = other.problem("train", 7)
    assert gold_answer(ours, foreign.dataset, "train", 7, foreign.answer, trust_peer_answers=False) is None
    assert gold_answer(ours, foreign.dataset, "train", 7, foreign.answer, trust_peer_answers=True) == foreign.answer
