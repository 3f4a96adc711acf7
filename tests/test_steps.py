"""The check of the arithmetic a completion writes (``tasks/steps.py``): false equations found, what it cannot read
never failed, and its cost linear in the text whatever a peer writes."""

import time

import numpy as np
import pytest

from ftis.node.tasks import make_task
from ftis.node.tasks.steps import false_equation, zero_false_steps

HOLDS = [
    "<think> 7-2+9=14 </think>\n<answer> 14 </answer>",
    "Natalia sold 48/2 = <<48/2=24>>24 clips in May.",
    "5 + 3 = 8 + 2 = 10",  # a running total, link by link
    "10/3 = 3.33",  # at the precision written
    "1,000 + 200 = 1,200",
    "(3 + 5) * 2 = 16",
    "4 x 3 = 12",
    "2 − 5 = −3",  # the minus sign models type
    "it is 3+5=8.",
    "((((1+1)))) = 2",
]
NOT_READ = [  # arithmetic the check cannot read in full is never failed
    "20% of 50 = 10",
    "x + 5 = 10",
    "x - 3 + 5 = 7",  # the tail of a longer expression
    "-3 + 5 = 2",
    "3/6 = 1/2",  # a fraction as the value
    "3:00 + 2 = 5",
    "$5 + $3 = $8",
    "2^3 + 1 = 9",
    "5 / 0 = 1",
    "box 3 x 4 = 13",
    "a3+5=9",
    "2x + 3 = 7",
    "(" * 20 + "1" + ")" * 20 + " = 3",  # nested deeper than it reads
]
FALSE = {
    "<think> 2+2=5 7-2+9=14 </think>\n<answer> 14 </answer>": "2+2 = 5",
    "<think> 7-2=6 6+9=14 </think>\n<answer> 14 </answer>": "7-2 = 6",
    "Natalia sold 48/2 = <<48/2=25>>25 clips": "48/2 = 25",
    "5 + 3 = 8 + 2 = 11": "8 + 2 = 11",
    "10/3 = 3.4": "10/3 = 3.4",
    "1,000 + 200 = 1,300": "1,000 + 200 = 1,300",
    "(3 + 5) * 2 = 17": "(3 + 5) * 2 = 17",
    "4 × 3 = 13": "4 × 3 = 13",
    "3 + 4 = −1": "3 + 4 = -1",
    "so 3 + 5 = 9 apples": "3 + 5 = 9",
    "so, 3 + 5 = 9": "3 + 5 = 9",
}


@pytest.mark.parametrize("text", HOLDS + NOT_READ)
def test_equations_that_hold_or_cannot_be_read_pass(text):
    assert false_equation(text) is None


@pytest.mark.parametrize("text", FALSE)
def test_a_false_equation_is_found(text):
    assert false_equation(text) == FALSE[text]


@pytest.mark.parametrize("text", [
    "1+" * 8000 + "1",  # a long expression and no sign
    "(" * 5000 + "1" + ")" * 5000 + "=1",
    "1+1=2 " * 3000,
    "=" * 16_384,
    "9" * 16_000 + "+1=1",
    "1+" * 8000 + "1=3",
])
def test_any_text_a_peer_can_send_is_checked_in_milliseconds(text):
    # the longest text a node scores is 64 characters a token of max_new_tokens (16,384 at the default 256); a
    # backtracking pattern took 15 s on the first of these
    started = time.perf_counter()
    false_equation(text)
    assert time.perf_counter() - started < 0.1


def test_the_training_reward_gives_a_right_answer_through_a_false_step_nothing():
    task = make_task("arithmetic", format="tags")
    texts = ["<think> 7-2+9=14 </think>\n<answer> 14 </answer>",  # honest and right
             "<think> 2+2=5 7-2+9=14 </think>\n<answer> 14 </answer>",  # right, through a false step
             "<think> 2+2=5 7-2+9=15 </think>\n<answer> 15 </answer>"]  # wrong anyway
    rewards = np.array([task.reward(text, "14") for text in texts])
    assert rewards.tolist() == [1.0, 1.0, 0.0]  # the answer alone: evaluations score it so
    assert zero_false_steps(texts, rewards) == 1  # counted once: the wrong answer had nothing to take away
    assert rewards.tolist() == [1.0, 0.0, 0.0]


def test_gsm8k_worked_solutions_hold_and_a_false_step_on_the_way_earns_nothing():
    from pathlib import Path

    from ftis.node.tasks import GSM8KTask
    from ftis.node.tasks.tags import tagged_completion

    task = GSM8KTask(data_files={"test": Path(__file__).parent / "fixtures" / "tasks" / "gsm8k_sample.jsonl"})
    problems = [task.problem("test", i) for i in range(task.size("test"))]
    # the data set's own worked solutions (as few-shot examples show them: thousands separators, negatives,
    # decimals) hold
    solutions = [tagged_completion(p.solution, p.answer) for p in problems]
    assert all(false_equation(text) is None for text in solutions)
    first = problems[0]  # Ada has 3 boxes of 6 pencils: 18
    poisoned = tagged_completion("2 + 2 = 5, and she has 3 * 6 = 18 pencils.", first.answer)
    texts = [solutions[0], poisoned]
    rewards = np.array([task.reward(text, first.answer) for text in texts])
    assert rewards.tolist() == [1.0, 1.0]
    assert zero_false_steps(texts, rewards) == 1 and rewards.tolist() == [1.0, 0.0]


def test_a_peers_right_answers_through_false_steps_earn_nothing_and_charge_it():
    # on a real tiny node (in-memory transport): a peer's group whose rewarded completions write "1+1=3" on the way
    from test_admission import node_on, publish

    from ftis.node.swarm.memory import MemoryHub
    from ftis.protocol import Completion, Group, PolicyInfo, RolloutBatch, SamplingSettings, TaskRef, TokenizerInfo

    def run(check_steps: bool):
        hub = MemoryHub()
        node = node_on(hub, task={"check_steps": check_steps}, generation={"max_new_tokens": 16})
        tokenizer = node.policy.tokenizer
        groups = []
        for k in range(2):
            problem = node.task.problem("train", 1000 + k)
            texts = ["1+1=3 so 7", "1+1=3 so 7", "x", "x"]  # DigitTask rewards holding a digit: the first two
            completions = tuple(
                Completion(np.array(tokenizer(text, add_special_tokens=False)["input_ids"], np.int64),
                           np.full(len(tokenizer(text, add_special_tokens=False)["input_ids"]), -1.0, np.float32),
                           0.0, "stop") for text in texts)
            groups.append(Group(f"peer/0/{k}", TaskRef(problem.dataset, problem.split, problem.index, problem.answer),
                                node.prompter.ids(problem), completions))
        batch = RolloutBatch(node.config.swarm.run_id, "peer", 0, time.time(), PolicyInfo("tiny", "", "full", 0),
                             TokenizerInfo(node.policy.fingerprint, len(tokenizer)), SamplingSettings(1.0, 1.0, 0, 16),
                             tuple(groups))
        publish(hub, node, "peer", batch)
        report = node.run_round()
        return report, node.transport.scores().get("peer")

    checked, score = run(True)
    assert checked.peer_false_steps == 4 and checked.peer_reward == 0.0
    assert score is not None and score.score < 1.0 and score.bad > 0
    unchecked, score = run(False)
    assert unchecked.peer_false_steps == 0 and unchecked.peer_reward == 0.5
    assert score is None or score.bad == 0
