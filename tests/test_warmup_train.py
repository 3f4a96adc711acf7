"""The supervised warm start: demonstrations the task rewards, a loss on target tokens only (checked
against a per-token loop), and a short real run on a tiny model that learns one-digit addition."""

import numpy as np
import pytest
import torch

from ftis.node.models import build_tokenizer, load_policy
from ftis.node.tasks import ArithmeticSettings, ArithmeticTask
from ftis.node.tasks.arithmetic import FORMATS
from ftis.node.warmup import WarmupDataError, WarmupPlan, demonstration, greedy_accuracy, supervised_warmup
from ftis.node.warmup.data import Example, collate, encode_example
from ftis.node.warmup.train import completion_loss, cosine_lr, learning_rate, training_problems

ONE_DIGIT_ADDITION = ArithmeticSettings(max_digits=1, operations="+")


@pytest.mark.parametrize("answer_format", sorted(FORMATS))
def test_the_task_rewards_every_demonstration_also_after_tokenizing(answer_format):
    tokenizer = build_tokenizer()
    task = ArithmeticTask(ArithmeticSettings(operations="+-*", operands=3, ood_operations="", format=answer_format))
    for split in ("train", "test", "ood"):
        for index in range(40):
            problem = task.problem(split, index)
            text = demonstration(task, problem)
            assert task.reward(text, problem.answer) == 1.0, (split, index, text)
            example = encode_example(task, problem, tokenizer)
            assert example.target_ids[-1] == tokenizer.eos_token_id  # the model learns to stop
            # decoded as a node decodes its samples (special tokens dropped): still rewarded
            decoded = tokenizer.decode(example.target_ids, skip_special_tokens=True)
            assert task.reward(decoded, problem.answer) == 1.0
            assert tokenizer.decode(example.prompt_ids) == task.prompt(problem)


def test_tags_demonstration_is_the_papers_format():
    task = ArithmeticTask(ArithmeticSettings(format="tags"))
    problem = task.problem("train", 3)
    assert demonstration(task, problem) == (
        f"<think> {problem.question}={problem.answer} </think>\n<answer> {problem.answer} </answer>"
    )
    assert demonstration(ArithmeticTask(ONE_DIGIT_ADDITION), problem) == problem.answer


def test_a_tokenizer_that_cannot_spell_the_problem_is_refused():
    class Lossy:
        eos_token_id, unk_token_id = 2, 3

        def __call__(self, text, add_special_tokens):
            def ids(one):
                return [3 if ch == "+" else 10 for ch in one]
            return {"input_ids": [ids(one) for one in text] if isinstance(text, list) else ids(text)}

    task = ArithmeticTask(ONE_DIGIT_ADDITION)
    with pytest.raises(WarmupDataError, match="cannot encode"):
        encode_example(task, task.problem("train", 0), Lossy())


def test_collate_masks_exactly_the_target_tokens():
    batch = collate([Example([10, 11, 12], [13, 2]), Example([20], [21, 22, 2])], pad_id=0)
    assert batch.input_ids.tolist() == [[10, 11, 12, 13, 2], [20, 21, 22, 2, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    # loss_mask[t] = 1 when input_ids[t + 1] is a target token
    assert batch.loss_mask.tolist() == [[0, 0, 1, 1], [1, 1, 1, 0]]


def test_completion_loss_equals_a_per_token_loop():
    policy = load_policy("tiny-small", seed=3)
    batch = collate([Example([10, 11, 12], [13, 2]), Example([20], [21, 22, 2])], pad_id=0)
    with torch.no_grad():
        logits = policy.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        fast = completion_loss(policy.model, batch)
    terms = []
    for row, (prompt, target) in enumerate([([10, 11, 12], [13, 2]), ([20], [21, 22, 2])]):
        for k, token in enumerate(target):
            position = len(prompt) - 1 + k  # the logits that predict target[k]
            terms.append(-torch.log_softmax(logits[row, position], dim=-1)[token])
    assert fast.item() == pytest.approx(torch.stack(terms).mean().item(), rel=1e-5)


def test_cosine_schedule_runs_from_peak_to_zero():
    assert cosine_lr(1e-3, 0, 100) == pytest.approx(1e-3)
    assert cosine_lr(1e-3, 50, 100) == pytest.approx(5e-4)
    assert cosine_lr(1e-3, 99, 100) < 1e-6


def test_a_short_warmup_lowers_the_loss_and_beats_the_untrained_model():
    policy = load_policy("tiny-small", seed=0)
    task = ArithmeticTask(ONE_DIGIT_ADDITION)
    seen = []
    result = supervised_warmup(policy, task, WarmupPlan(steps=150, learning_rate=3e-3, batch_size=32,
                                                        eval_problems=50), seed=0, on_progress=seen.append)
    assert [p.step for p in seen] == [50, 100, 150] and all(p.steps == 150 for p in seen)
    assert result.last_loss < result.first_loss / 3
    assert result.accuracy_before == 0.0  # random weights never write the right sum and stop
    assert result.accuracy_after >= 0.2
    assert result.accuracy_after == greedy_accuracy(policy, task, 50)  # the policy was trained in place
    assert not policy.model.training


def test_the_same_seed_gives_the_same_weights_and_another_seed_does_not():
    task = ArithmeticTask(ONE_DIGIT_ADDITION)
    plan = WarmupPlan(steps=5, learning_rate=3e-3, batch_size=8, eval_problems=5)

    def weights(data_seed: int) -> list[torch.Tensor]:
        policy = load_policy("tiny-small", seed=0)
        supervised_warmup(policy, task, plan, seed=data_seed)
        return [p.detach().clone() for p in policy.model.parameters()]

    first, again, other = weights(1), weights(1), weights(2)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first, other, strict=True))


def test_a_plan_without_steps_is_refused():
    with pytest.raises(ValueError, match="steps"):
        WarmupPlan(steps=0, learning_rate=1e-3, batch_size=8)


def test_a_warmup_stops_at_the_first_dev_check_that_reaches_its_accuracy(monkeypatch):
    from ftis.node.warmup import train

    checks = iter([0.1, 0.2, 0.5, 0.9])
    seen: list[str] = []

    def fake_accuracy(policy, task, problems, batch_size=256, split="test"):
        seen.append(split)
        return next(checks) if split == "dev" else 0.0

    monkeypatch.setattr(train, "greedy_accuracy", fake_accuracy)
    policy = load_policy("tiny-small", seed=0)
    plan = WarmupPlan(steps=100, learning_rate=3e-3, batch_size=4, eval_problems=5, schedule="constant",
                      stop_accuracy=0.4, check_every=2)
    result = supervised_warmup(policy, ArithmeticTask(ONE_DIGIT_ADDITION), plan, seed=0)
    assert (result.steps_taken, result.dev_accuracy) == (6, 0.5)  # checks after steps 2, 4, 6: 0.5 >= 0.4
    assert seen == ["test", "dev", "dev", "dev", "test"]  # test before and after; dev only for the stop
    full = supervised_warmup(load_policy("tiny-small", seed=0), ArithmeticTask(ONE_DIGIT_ADDITION),
                             WarmupPlan(steps=3, learning_rate=3e-3, batch_size=4, eval_problems=5), seed=0)
    assert (full.steps_taken, full.dev_accuracy) == (3, None)  # no stop rule: every step, no dev check


def test_the_constant_schedule_keeps_its_rate_and_the_cosine_decays():
    constant = WarmupPlan(steps=10, learning_rate=1e-3, batch_size=1, schedule="constant")
    cosine = WarmupPlan(steps=10, learning_rate=1e-3, batch_size=1)
    assert [learning_rate(constant, step) for step in (0, 5, 9)] == [1e-3] * 3
    assert learning_rate(cosine, 5) == pytest.approx(5e-4)


def test_a_no_carry_share_of_one_draws_only_problems_without_a_carry():
    task = ArithmeticTask(ArithmeticSettings(operations="+", operand_draw="value"))
    rng = np.random.default_rng(0)
    everything = training_problems(task, WarmupPlan(steps=1, learning_rate=1e-3, batch_size=200), rng)
    assert 0.5 < sum(task.skill(p) == "carry" for p in everything) / 200 < 0.9  # most 2-digit sums carry
    specialist = training_problems(task, WarmupPlan(steps=1, learning_rate=1e-3, batch_size=200,
                                                    no_carry_share=1.0), rng)
    assert all(task.skill(p) == "no-carry" for p in specialist)


@pytest.mark.parametrize("settings", [
    {"schedule": "linear"}, {"stop_accuracy": 0.0}, {"stop_accuracy": 1.5}, {"check_every": 0},
    {"no_carry_share": 1.1},
])
def test_bad_warmup_plans_are_refused(settings):
    with pytest.raises(ValueError):
        WarmupPlan(steps=1, learning_rate=1e-3, batch_size=1, **settings)
