"""The supervised warm start itself: teacher-forced cross-entropy on the completion tokens of arithmetic
problems, then greedy accuracy on held-out ones.

    result = supervised_warmup(policy, task, WarmupPlan(steps=2000, learning_rate=2e-3, batch_size=32,
                                                        schedule="constant", stop_accuracy=0.35), seed=0)
    result.accuracy_before, result.accuracy_after  # on the task's "test" split, greedy decoding
    result.steps_taken, result.dev_accuracy        # where the early stop happened, and what it saw

Why: GRPO learns nothing from a group whose rewards are all equal, and a random tiny model gets reward
0 on every arithmetic problem. A short supervised phase brings it to a useful middle, where groups
disagree and F-TIS has something to work with.

Where to stop matters as much as starting (docs/learning.md). A warm-up annealed to convergence (the
"cosine" schedule run to its end) leaves a model at a flat point that GRPO at a stable learning rate
does not move; a warm-up stopped early, on purpose, at a middling accuracy (``stop_accuracy``, measured
on the "dev" split every ``check_every`` steps, with a constant learning rate) leaves it where its own
samples still carry signal. That is what the demo and the experiment use.

What the loop does, in full: each step draws ``batch_size`` problems of the "train" split (indices from
a numpy generator seeded with ``seed``; with ``no_carry_share`` > 0 that share of them is redrawn until
it needs no carry, which makes a specialist that has rarely seen a carry), builds prompt + demonstration
+ end-of-sequence (``data.py``), and takes one AdamW step (no weight decay, gradients clipped to norm 1)
on the mean cross-entropy over the target tokens of the batch (the prompt is context, never a target).
The learning rate follows a cosine from ``learning_rate`` down to 0 over ``steps``, or stays constant.
There is no other randomness (the tiny models have no dropout), so a seed, a plan and a model name
determine the weights.

Accuracy is the task's own reward on greedy completions of ``eval_problems`` distinct problems of the
"test" split (disjoint from "train" and "dev"), decoded as a node decodes its samples.
"""

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ftis.node.generation.hf import greedy
from ftis.node.models import Policy
from ftis.node.tasks import ArithmeticTask, Problem
from ftis.node.tasks.eval_set import fixed_problems
from ftis.node.warmup.data import Batch, ExampleEncoder, collate

_DATA_STREAM = 2  # numpy seed stream [seed, 2]: the node's own sampling uses [seed, 1]
_EXTRA_EVAL_TOKENS = 8  # greedy may run this far past the longest target, so a model that never stops fails
_REDRAWS = 100  # a no-carry redraw gives up (keeps its last draw) after this many tries
SCHEDULES = ("cosine", "constant")


@dataclass(frozen=True)
class WarmupPlan:
    steps: int  # optimizer steps (at most, with stop_accuracy)
    learning_rate: float  # AdamW learning rate: the peak of the cosine, or the constant one
    batch_size: int  # problems per step
    eval_problems: int = 200  # distinct held-out problems greedy accuracy is measured on (test; dev for the stop)
    schedule: str = "cosine"  # "cosine" (to 0 after ``steps``) or "constant"
    stop_accuracy: float | None = None  # stop at the first dev check at or above this greedy accuracy
    check_every: int = 25  # steps between dev checks (with stop_accuracy)
    no_carry_share: float = 0.0  # share of each batch redrawn until it needs no carry (addition specialists)

    def __post_init__(self):
        if self.steps < 1 or self.batch_size < 1 or self.eval_problems < 1 or not self.learning_rate > 0:
            raise ValueError(f"a warm-up plan needs steps, batch_size, eval_problems >= 1, learning_rate > 0: {self}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"a warm-up schedule is one of {', '.join(SCHEDULES)}, got {self.schedule!r}")
        if self.stop_accuracy is not None and not 0.0 < self.stop_accuracy <= 1.0:
            raise ValueError(f"stop_accuracy must be in (0, 1], got {self.stop_accuracy}")
        if self.check_every < 1 or not 0.0 <= self.no_carry_share <= 1.0:
            raise ValueError(f"check_every must be >= 1 and no_carry_share in [0, 1]: {self}")


@dataclass(frozen=True)
class Progress:
    step: int  # optimizer steps taken so far (1 … steps)
    steps: int
    loss: float  # mean target-token cross-entropy of this step's batch, nats
    seconds: float  # since training started


@dataclass(frozen=True)
class WarmupResult:
    accuracy_before: float  # greedy accuracy of the model as it came
    accuracy_after: float
    eval_problems: int
    first_loss: float  # the first step's batch loss
    last_loss: float  # mean batch loss over the last tenth of the steps
    train_seconds: float  # the optimizer steps only (evaluations not included)
    steps_taken: int = 0  # optimizer steps actually taken (fewer than planned after an early stop)
    dev_accuracy: float | None = None  # the last dev check's greedy accuracy (None: no stop rule)


def completion_loss(model: nn.Module, batch: Batch) -> Tensor:
    """Mean cross-entropy of the target tokens given everything before them (teacher forcing)."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1]  # (B, T-1, V)
    nll = F.cross_entropy(logits.flatten(0, 1).float(), batch.input_ids[:, 1:].flatten(), reduction="none")
    nll = nll.view_as(batch.loss_mask)  # (B, T-1)
    return (nll * batch.loss_mask).sum() / batch.loss_mask.sum()


def greedy_accuracy(policy: Policy, task: ArithmeticTask, problems: int, batch_size: int = 256,
                    split: str = "test") -> float:
    """Share of ``problems`` distinct problems of ``split`` (the evaluation's set, ``tasks/eval_set.py``) whose
    greedy completion the task rewards."""
    tokenizer = policy.tokenizer
    held_out = fixed_problems(task, split, problems)
    examples = ExampleEncoder(task, tokenizer)(held_out)
    longest = max(len(example.target_ids) for example in examples)
    completions = greedy(
        policy.model, [np.array(e.prompt_ids, dtype=np.int64) for e in examples], longest + _EXTRA_EVAL_TOKENS,
        eos_token_ids=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, batch_size=batch_size,
    )
    texts = tokenizer.batch_decode([c.token_ids.tolist() for c in completions], skip_special_tokens=True)
    return float(np.mean([task.reward(text, problem.answer) for text, problem in zip(texts, held_out, strict=True)]))


def cosine_lr(peak: float, step: int, steps: int) -> float:
    """The learning rate of optimizer step ``step`` (0-based): peak at 0, falling to 0 after the last."""
    return peak * 0.5 * (1.0 + math.cos(math.pi * step / steps))


def learning_rate(plan: WarmupPlan, step: int) -> float:
    """The learning rate of optimizer step ``step`` (0-based) under ``plan``'s schedule."""
    return cosine_lr(plan.learning_rate, step, plan.steps) if plan.schedule == "cosine" else plan.learning_rate


def training_problems(task: ArithmeticTask, plan: WarmupPlan, rng: np.random.Generator) -> list[Problem]:
    """One step's problems of the "train" split; ``no_carry_share`` of them redrawn until they need no carry."""
    problems = []
    for _ in range(plan.batch_size):
        problem = task.problem("train", int(rng.integers(0, 2**31 - 1)))
        if plan.no_carry_share and rng.random() < plan.no_carry_share:
            for _ in range(_REDRAWS):
                if task.skill(problem) != "carry":
                    break
                problem = task.problem("train", int(rng.integers(0, 2**31 - 1)))
        problems.append(problem)
    return problems


def supervised_warmup(
    policy: Policy,
    task: ArithmeticTask,
    plan: WarmupPlan,
    *,
    seed: int,
    on_progress: Callable[[Progress], None] | None = None,
    progress_every: int = 50,
) -> WarmupResult:
    """Train ``policy`` in place (every trainable parameter) on ``task``'s demonstrations; see the module
    docstring. ``on_progress`` is called every ``progress_every`` steps and after the last one."""
    model, tokenizer = policy.model, policy.tokenizer
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    accuracy_before = greedy_accuracy(policy, task, plan.eval_problems)
    encode = ExampleEncoder(task, tokenizer)
    rng = np.random.default_rng([seed, _DATA_STREAM])
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=plan.learning_rate, weight_decay=0.0)
    losses: list[float] = []
    dev_accuracy: float | None = None
    checking = 0.0  # seconds spent on dev checks, left out of train_seconds
    model.train()
    started = time.perf_counter()
    for step in range(plan.steps):
        examples = encode(training_problems(task, plan, rng))
        batch = collate(examples, pad_id)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(plan, step)
        loss = completion_loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.trainable_parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())  # one sync per step: the progress line and the result need it anyway
        done = step + 1
        if on_progress is not None and (done % progress_every == 0 or done == plan.steps):
            on_progress(Progress(done, plan.steps, losses[-1], time.perf_counter() - started - checking))
        if plan.stop_accuracy is not None and done % plan.check_every == 0:
            began = time.perf_counter()
            model.eval()
            dev_accuracy = greedy_accuracy(policy, task, plan.eval_problems, split="dev")
            model.train()
            checking += time.perf_counter() - began
            if dev_accuracy >= plan.stop_accuracy:
                break
    train_seconds = time.perf_counter() - started - checking
    model.eval()
    tail = losses[-max(1, len(losses) // 10):]
    return WarmupResult(
        accuracy_before=accuracy_before,
        accuracy_after=greedy_accuracy(policy, task, plan.eval_problems),
        eval_problems=plan.eval_problems,
        first_loss=losses[0],
        last_loss=float(np.mean(tail)),
        train_seconds=train_seconds,
        steps_taken=len(losses),
        dev_accuracy=dev_accuracy,
    )
