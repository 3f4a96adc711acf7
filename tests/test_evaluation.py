"""Greedy evaluation: accuracy against a hand count on a tiny model, determinism, the fixed problem set
of synthetic splits, and periodic evaluation in the join loop writing its records to metrics.jsonl."""

import json
import math

import pytest
import torch

from ftis.node.config import NodeConfig
from ftis.node.evaluation.evaluation import (
    EvalError,
    eval_problems,
    evaluate,
    held_out_split,
    problem_indices,
)
from ftis.node.evaluation.periodic_eval import EvalSchedule
from ftis.node.generation.hf import greedy
from ftis.node.models import load_policy
from ftis.node.swarm.exchange.limits import InboxLimits
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.node.tasks import ArithmeticSettings, ArithmeticTask, GSM8KTask, Problem
from ftis.node.tasks.base import PromptParts, check_index
from ftis.node.tasks.eval_set import SYNTHETIC_DEFAULT_LIMIT
from ftis.node.tasks.prompts import prompt_ids

MAX_NEW = 6


@pytest.fixture(scope="module")
def policy():
    """A tiny model whose greedy completions differ between prompts (a freshly initialised one repeats
    one character whatever it is asked), so that a mix-up between problems would show."""
    policy = load_policy("tiny-small", seed=3)
    with torch.no_grad():
        for parameter in policy.model.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=torch.Generator().manual_seed(1)))
    return policy


class ChosenGoldTask:
    """A stand-in task whose gold answers are chosen by the test: reward 1 iff the completion is exactly
    the gold string; an answer "parses" when the completion holds a digit. Prompts get shorter as the
    index grows, so evaluation's length sort reorders them and must put the records back in order."""

    name = "chosen"
    splits = ("test",)
    answer_format = "exact"
    shot_split = None

    def __init__(self, golds: list[str]):
        self.golds = golds

    def problem(self, split: str, index: int) -> Problem:
        check_index(self.name, split, index, len(self.golds))
        return Problem(self.name, split, index, "x" * (len(self.golds) - index) + f"{index}=", self.golds[index])

    def size(self, split: str) -> int:
        return len(self.golds)

    def prompt(self, problem: Problem) -> str:
        return problem.question

    def prompt_parts(self, problem: Problem) -> PromptParts:
        return PromptParts("", problem.question, "")

    def solved(self, problem: Problem) -> str:
        return problem.answer

    def parse_answer(self, completion_text: str) -> str | None:
        return completion_text if any(ch.isdigit() for ch in completion_text) else None

    def reward(self, completion_text: str, gold: str) -> float:
        return float(completion_text == gold)


def _one_by_one(policy, task) -> list:
    """Each problem's greedy completion decoded alone (batch of one): the reference for the batched run."""
    tokenizer = policy.tokenizer
    out = []
    for index in range(task.size("test")):
        ids = prompt_ids(tokenizer, task.prompt(task.problem("test", index)), chat=False)
        completion = greedy(policy.model, [ids], MAX_NEW, eos_token_ids=tokenizer.eos_token_id,
                            pad_token_id=tokenizer.pad_token_id, batch_size=1)[0]
        out.append((tokenizer.decode(completion.token_ids.tolist(), skip_special_tokens=True), completion))
    return out


def test_accuracy_matches_a_hand_count(policy):
    reference = _one_by_one(policy, ChosenGoldTask(["?"] * 7))
    assert len({text for text, _ in reference}) > 3
    # Even problems' gold is exactly what the model writes, odd ones' can never be written: 4 of 7 right.
    golds = [text if index % 2 == 0 else f"never {text}" for index, (text, _) in enumerate(reference)]
    task = ChosenGoldTask(golds)
    calls = []
    result = evaluate(policy, task, "test", batch_size=3, max_new_tokens=MAX_NEW,
                      progress=lambda *args: calls.append(args), keep_records=True)
    assert (result.correct, result.total, result.accuracy) == (4, 7, 4 / 7)
    assert [record.index for record in result.records] == list(range(7))  # problem order, not length order
    assert [record.completion for record in result.records] == [text for text, _ in reference]
    assert [record.reward for record in result.records] == [1.0, 0.0] * 3 + [1.0]
    assert result.format_valid == sum(any(ch.isdigit() for ch in text) for text, _ in reference) / 7
    assert result.truncated == sum(c.finish_reason == "length" for _, c in reference) / 7
    assert result.mean_completion_tokens == sum(c.num_tokens for _, c in reference) / 7
    assert [(done, total) for done, total, _ in calls] == [(3, 7), (6, 7), (7, 7)]
    assert calls[-1][2] == 4
    assert result.tokens_per_s > 0 and result.seconds > 0
    assert (result.dataset, result.split) == ("chosen", "test")


def test_two_evaluations_are_identical(policy):
    task = ArithmeticTask()
    first = evaluate(policy, task, "test", limit=5, batch_size=2, max_new_tokens=4, keep_records=True)
    second = evaluate(policy, task, "test", limit=5, batch_size=2, max_new_tokens=4, keep_records=True)
    assert first.records == second.records
    assert (first.correct, first.format_valid, first.mean_completion_tokens) == (
        second.correct, second.format_valid, second.mean_completion_tokens)
    assert not evaluate(policy, task, "test", limit=5, batch_size=2, max_new_tokens=4).records  # only when asked


def test_a_synthetic_split_is_scored_on_a_fixed_set_of_problems(policy):
    fixed = problem_indices(None, 4)
    assert fixed == [241887415, 1265291760, 526875090, 1816171639]  # pinned: a change would move every eval set
    assert problem_indices(None, 2) == fixed[:2]  # a smaller limit is a prefix
    assert len(set(problem_indices(None, 1000))) == 1000
    assert len(problem_indices(None, None)) == SYNTHETIC_DEFAULT_LIMIT
    task = ArithmeticTask()
    result = evaluate(policy, task, "ood", limit=4, max_new_tokens=3, keep_records=True)
    assert [record.index for record in result.records] == fixed
    assert [record.gold for record in result.records] == [task.problem("ood", i).answer for i in fixed]


def test_a_finite_split_is_scored_from_its_start():
    assert problem_indices(10, 3) == [0, 1, 2]
    assert problem_indices(10, None) == list(range(10))
    assert problem_indices(2, 5) == [0, 1]
    with pytest.raises(EvalError, match="limit"):
        problem_indices(10, 0)


def test_bad_requests_are_refused(policy, tmp_path):
    with pytest.raises(EvalError, match="batch_size"):
        evaluate(policy, ArithmeticTask(), "test", limit=2, batch_size=0)
    with pytest.raises(EvalError, match="max_new_tokens"):
        evaluate(policy, ArithmeticTask(), "test", limit=2, max_new_tokens=0)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(EvalError, match="no problems"):
        evaluate(policy, GSM8KTask(data_files={"test": empty}), "test")


def test_the_held_out_split_is_test():
    assert held_out_split(ArithmeticTask()) == "test"
    with pytest.raises(EvalError, match="no 'test' split"):
        held_out_split(GSM8KTask(data_files={"train": "train.jsonl"}))


def test_the_schedule_evaluates_first_then_past_each_multiple():
    schedule = EvalSchedule(every=5)
    seen = []
    for round in [0, 1, 2, 3, 4, 5, 6, 8, 13, 14, 15]:  # a rounds-mode node jumped from 8 to 13, over 10
        if schedule.due(round):
            schedule.done(round)
            seen.append(round)
    assert seen == [0, 5, 13, 15]
    resumed = EvalSchedule(every=5)
    assert resumed.due(7)  # the start of any run
    assert not any(EvalSchedule(every=0).due(round) for round in range(20))


def test_a_schedule_not_at_start_skips_the_first_round_only():
    schedule = EvalSchedule(every=5, at_start=False)
    seen = [round for round in [0, 1, 4, 5, 9, 10] if schedule.due(round) and schedule.done(round) is None]
    assert seen == [5, 10]


def _solo_node(config: NodeConfig):
    """A node alone on an in-memory transport."""
    from ftis.node.runner.join import build_node

    limits = InboxLimits(max_age_s=600, per_peer_quota=8, max_batches=64, max_bytes=10**8)
    return build_node(config, lambda fingerprint: MemoryTransport(MemoryHub(), "ftis-demo", "solo", fingerprint,
                                                                   limits))


def test_periodic_evaluation_writes_its_records_into_the_metrics(tmp_path):
    from ftis.node.runner.join import run_node

    config = NodeConfig.model_validate({
        "model": {"name": "tiny-small"},
        "task": {"name": "arithmetic"},
        "generation": {"prompts_per_round": 2, "group_size": 2, "max_new_tokens": 3},
        "eval": {"every": 2, "limit": 3, "max_new_tokens": 2},
        "metrics": {"display": "lines", "tensorboard": False},
    })
    node = _solo_node(config)
    lines: list[str] = []
    run_node(node, rounds=4, out=tmp_path, echo=lines.append)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if "eval_split" in r]
    steps = [r for r in records if "eval_split" not in r]
    assert [r["round"] for r in evals] == [0, 2, 4]  # the start, every 2nd round, and the final weights
    assert [r["round"] for r in steps] == [0, 1, 2, 3]
    assert "eval_split" in records[0]  # the first line: the untrained model, before round 0
    for record in evals:
        assert record["eval_split"] == "test" and record["eval_total"] == 3
        assert record["eval_dataset"] == node.task.name
        assert 0.0 <= record["eval_accuracy"] <= 1.0 and 0.0 <= record["eval_format_valid"] <= 1.0
        assert record["eval_mean_completion_tokens"] <= 2
    assert evals[0]["policy_version"] == 0
    # the step that started with an evaluation carries its accuracy, for the display and TensorBoard
    assert [r["eval_accuracy"] is not None for r in steps] == [True, False, True, False]
    assert steps[0]["eval_accuracy"] == evals[0]["eval_accuracy"]
    assert sum("eval arith/" in line for line in lines) == 3


def test_an_eval_split_the_task_lacks_stops_the_run_before_any_training(tmp_path):
    from ftis.node.runner.join import run_node
    from ftis.node.tasks import UnknownSplitError

    config = NodeConfig.model_validate({
        "generation": {"prompts_per_round": 1, "group_size": 2, "max_new_tokens": 2},
        "eval": {"every": 1, "split": "validation"},
        "metrics": {"display": "lines", "tensorboard": False},
    })
    node = _solo_node(config)
    with pytest.raises(UnknownSplitError, match="no split 'validation'"):
        run_node(node, rounds=2, out=tmp_path, echo=lambda line: None)
    assert node.round == 0 and node.trainer.policy_version == 0
    with pytest.raises(RuntimeError, match="closed"):
        node.transport.receive()


def test_a_small_problem_space_is_scored_once_per_problem():
    # one-digit addition: 100 pairs, about 10 in the test split; asking for 50 gives each of them once
    task = ArithmeticTask(ArithmeticSettings(max_digits=1, operations="+"))
    problems = eval_problems(task, "test", 50)
    questions = [problem.question for problem in problems]
    assert len(set(questions)) == len(questions) < 20
    assert eval_problems(task, "test", 5) == problems[:5]  # a smaller limit is still a prefix
    wide = ArithmeticTask(ArithmeticSettings(operations="+", operand_draw="value"))
    assert len({p.question for p in eval_problems(wide, "test", 300)}) == 300


def test_accuracy_per_skill_and_the_standard_error(policy, tmp_path):
    task = ArithmeticTask(ArithmeticSettings(operations="+", operand_draw="value"))
    result = evaluate(policy, task, "test", limit=40, max_new_tokens=4, keep_records=True)
    problems = eval_problems(task, "test", 40)
    carry = sum(task.skill(problem) == "carry" for problem in problems)
    assert result.by_skill["carry"][1] == carry and result.by_skill["no-carry"][1] == 40 - carry
    assert sum(right for right, _ in result.by_skill.values()) == result.correct
    assert result.standard_error == pytest.approx((result.accuracy * (1 - result.accuracy) / 40) ** 0.5)
    assert math.isnan(result.skill_accuracy("borrow"))
    rows = tmp_path / "test.jsonl"
    rows.write_text(json.dumps({"question": "1+1?", "answer": "so #### 2"}) + "\n")
    assert not evaluate(policy, GSM8KTask(data_files={"test": rows}), "test", max_new_tokens=2).by_skill  # none named
