"""Greedy evaluation of a policy on a task's held-out split: accuracy, format, length and speed.

    from ftis.node.evaluation.evaluation import evaluate
    result = evaluate(policy, make_task("gsm8k"), "test", limit=200, max_new_tokens=512)
    print(f"{result.accuracy:.1%} of {result.total}")

Which problems (``eval_problems``): the fixed set of ``tasks/eval_set.py``, the same in every evaluation, on
every machine: the first ``limit`` of a finite split (all of it when ``limit`` is None), or ``limit`` *distinct*
problems of a synthetic one, drawn from a hash of their rank. A split with fewer distinct problems than asked for
is scored whole (``total`` says how many).

Noise: ``standard_error`` is the binomial one, sqrt(p(1 − p) / total); a change of accuracy between two
evaluations of one run (same problems) is read against it. Tasks that name a skill per problem
(``skill``, e.g. arithmetic's carry / no-carry) get their accuracy per skill in ``by_skill``.

How: each problem's prompt is built exactly as the node builds its training prompts (the node's
``prompts.Prompter``: template, begin-of-sequence token, solved examples); prompts are sorted by length so that
a batch pads little, decoded greedily (argmax, ``generation.hf.greedy``, ending at the node's stop strings too) in
batches of ``batch_size``, decoded to text and scored with the task's own reward (1 = correct). "In format" counts
the completions the task could parse an answer from at all (``task.parse_answer``, in its ``answer_format``), right
or wrong: a model that never writes the format scores 0 however well it computes. Deterministic for a given model,
problem set, batch size and device: there is no sampling.
"""

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ftis.node.errors import UserError
from ftis.node.generation.hf import greedy
from ftis.node.generation.stops import StopStrings
from ftis.node.models import Policy
from ftis.node.tasks import Problem, Task
from ftis.node.tasks.eval_set import fixed_indices, fixed_problems
from ftis.node.tasks.prompts import Prompter, uses_bos

HELD_OUT_SPLIT = "test"  # every built-in task's held-out split, evaluated unless another is named

# progress(done, total, correct): called after each batch with the problems scored so far
EvalProgress = Callable[[int, int, int], None]


class EvalError(UserError, ValueError):
    """An evaluation that cannot run as asked (bad limit or batch size, an empty split)."""


@dataclass(frozen=True)
class EvalRecord:
    """One problem's outcome."""

    index: int  # the problem's index in its split
    gold: str
    completion: str  # the decoded completion, special tokens skipped (as the reward sees it)
    answer: str | None  # what the task parsed from it; None when the format does not hold
    reward: float
    tokens: int
    finish_reason: str  # "stop" (end-of-sequence token) or "length" (max_new_tokens reached)


@dataclass(frozen=True)
class EvalResult:
    dataset: str  # the task's name, e.g. "gsm8k"
    split: str
    total: int  # problems scored
    correct: int  # problems with reward 1
    accuracy: float  # correct / total
    format_valid: float  # fraction of completions the task could parse an answer from (in_format / total)
    truncated: float  # fraction that reached max_new_tokens without an end-of-sequence token
    mean_completion_tokens: float
    tokens_per_s: float  # generated tokens / seconds spent generating
    seconds: float  # wall time: prompts, generation, scoring
    records: tuple[EvalRecord, ...] = ()  # per problem, in problem order, when asked for
    by_skill: dict[str, tuple[int, int]] = field(default_factory=dict)  # skill -> (correct, total), when named
    answer_format: str = ""  # the task's answer format ("tags", "plain")
    in_format: int = 0  # completions the task could parse an answer from

    @property
    def standard_error(self) -> float:
        """The binomial standard error of ``accuracy``: sqrt(p(1 − p) / total)."""
        return math.sqrt(self.accuracy * (1.0 - self.accuracy) / self.total)

    def skill_accuracy(self, skill: str) -> float:
        """Accuracy on the problems of one skill (nan when there were none)."""
        correct, total = self.by_skill.get(skill, (0, 0))
        return correct / total if total else float("nan")


def held_out_split(task: Task) -> str:
    """The split evaluated when none is named: ``HELD_OUT_SPLIT`` when the task has it."""
    if HELD_OUT_SPLIT in task.splits:
        return HELD_OUT_SPLIT
    raise EvalError(f"{task.name} has no {HELD_OUT_SPLIT!r} split (it has {', '.join(task.splits)}): "
                    "name the split to evaluate")


def problem_indices(size: int | None, limit: int | None) -> list[int]:
    """The indices evaluated in a split of ``size`` problems (None: synthetic, unbounded); see the
    module docstring."""
    _check_limit(limit)
    return fixed_indices(size, limit)


def _check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or limit < 1):
        raise EvalError(f"limit must be at least 1 (or None for the whole split), got {limit}")


def eval_problems(task: Task, split: str, limit: int | None) -> list[Problem]:
    """The problems ``evaluate`` scores (see the module docstring). Raises the task's errors for an unknown
    split or bad data, and ``EvalError`` for a bad limit or an empty split."""
    size = task.size(split)  # the task's errors before the limit's
    _check_limit(limit)
    if size == 0:
        raise EvalError(f"{task.name}/{split} has no problems")
    return fixed_problems(task, split, limit)


def evaluate(
    policy: Policy,
    task: Task,
    split: str,
    *,
    limit: int | None = None,
    batch_size: int = 64,
    max_new_tokens: int = 256,
    chat: bool = False,
    progress: EvalProgress | None = None,
    keep_records: bool = False,
    prompter: Prompter | None = None,
    stop: StopStrings | None = None,
) -> EvalResult:
    """Greedy accuracy of ``policy`` on ``split`` of ``task`` (see the module docstring). ``prompter``: how the node
    renders its prompts; None: one-turn prompts, in the tokenizer's chat template when ``chat``, with the
    begin-of-sequence token where the tokenizer adds one. ``stop``: the node's stop strings."""
    if batch_size < 1:
        raise EvalError(f"batch_size must be at least 1, got {batch_size}")
    if max_new_tokens < 1:
        raise EvalError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
    started = time.perf_counter()
    problems = eval_problems(task, split, limit)
    tokenizer = policy.tokenizer
    prompter = prompter or Prompter(tokenizer, task, chat, uses_bos(tokenizer, "auto"))
    prompts = [prompter.ids(problem) for problem in problems]
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # stable: ties keep problem order
    records: list[EvalRecord | None] = [None] * len(problems)
    generating, correct = 0.0, 0
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        began = time.perf_counter()
        completions = greedy(policy.model, [prompts[i] for i in chunk], max_new_tokens,
                             eos_token_ids=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                             batch_size=batch_size, stop=stop)
        generating += time.perf_counter() - began
        texts = tokenizer.batch_decode([c.token_ids.tolist() for c in completions], skip_special_tokens=True)
        for i, completion, text in zip(chunk, completions, texts, strict=True):
            problem = problems[i]
            reward = task.reward(text, problem.answer)
            records[i] = EvalRecord(problem.index, problem.answer, text, task.parse_answer(text), reward,
                                    completion.num_tokens, completion.finish_reason)
            correct += reward == 1.0
        if progress is not None:
            progress(start + len(chunk), len(order), correct)
    done = [record for record in records if record is not None]
    total, tokens = len(done), sum(record.tokens for record in done)
    in_format = sum(record.answer is not None for record in done)
    by_skill: dict[str, tuple[int, int]] = {}
    skill_of = getattr(task, "skill", None)
    for problem, record in zip(problems, done, strict=True) if skill_of is not None else ():
        if (skill := skill_of(problem)) is not None:
            right, seen = by_skill.get(skill, (0, 0))
            by_skill[skill] = (right + (record.reward == 1.0), seen + 1)
    return EvalResult(
        dataset=task.name,
        split=split,
        total=total,
        correct=correct,
        accuracy=correct / total,
        format_valid=in_format / total,
        truncated=sum(record.finish_reason == "length" for record in done) / total,
        mean_completion_tokens=tokens / total,
        tokens_per_s=tokens / generating if generating > 0 else 0.0,
        seconds=time.perf_counter() - started,
        records=tuple(done) if keep_records else (),
        by_skill=dict(sorted(by_skill.items())),
        answer_format=task.answer_format,
        in_format=in_format,
    )


def summary_line(result: EvalResult) -> str:
    """One line for logs: ``eval gsm8k/test  accuracy 41.5% ± 3.5% (83/200)  in format (tags) 184/200  ...`` (± one
    standard error), with the accuracy of each skill the task names."""
    skills = "".join(f"  {skill} {right / seen:.1%}" for skill, (right, seen) in result.by_skill.items())
    return (f"eval {result.dataset}/{result.split}  accuracy {result.accuracy:.1%} ± {result.standard_error:.1%} "
            f"({result.correct}/{result.total}){skills}"
            f"  in format ({result.answer_format}) {result.in_format}/{result.total}  truncated {result.truncated:.0%}"
            f"  length {result.mean_completion_tokens:.1f} tok  {result.tokens_per_s:.0f} tok/s"
            f"  {result.seconds:.1f} s")
