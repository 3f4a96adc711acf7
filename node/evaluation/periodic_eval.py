"""Evaluation inside the join loop (``[eval]`` of the config): the node's greedy accuracy on its task's
held-out split at the start of a run, at the start of every round whose number reaches the next
multiple of ``eval.every``, and once more after the last round of a run with a fixed number of rounds.

Why at the start of a round: that round's ``own_reward`` is the sampling accuracy of the same weights,
so the step record that carries ``eval_accuracy`` describes one policy. Round 0 is the untrained model.
The join loop runs it inside the round (``Node.run_round(evaluate)``), once the round's batch is published
and before its step: the weights are still the round's first, and the peers need not wait for it.
A node in ``rounds`` mode may jump rounds to fall into step with its peers; it evaluates at the first
round past each multiple. The problems are the same every time (``tasks/eval_set.py``).

Each evaluation writes a record of its own into ``metrics.jsonl`` (``eval_record``: ``round`` is the
round it precedes, the other keys start with ``eval_``; ``eval_skills`` holds the accuracy per skill
when the task names skills, e.g. arithmetic's carry / no-carry) and prints a summary line; the run loop also
passes its accuracy into that round's step record, which the display and TensorBoard show.
"""

import time
from collections.abc import Callable
from typing import Any, Protocol

from ftis.node.config import NodeConfig
from ftis.node.evaluation.evaluation import EvalResult, evaluate, held_out_split, summary_line
from ftis.node.generation.stops import StopStrings
from ftis.node.models import Policy
from ftis.node.records.metrics import MetricsLog
from ftis.node.tasks import Task
from ftis.node.tasks.prompts import Prompter
from ftis.node.trainer.trainer import Trainer


class RunningNode(Protocol):
    """What the loop's evaluation reads of a node: ``runner/node.py``'s ``Node``, on the layer above."""

    config: NodeConfig
    policy: Policy
    task: Task
    prompter: Prompter
    stop: StopStrings | None
    trainer: Trainer
    round: int  # rounds completed: the next round's number


def eval_record(result: EvalResult, round: int, policy_version: int) -> dict[str, Any]:
    """The flat, JSON-ready line one evaluation adds to ``metrics.jsonl``."""
    return {
        "round": round,
        "time": time.time(),
        "policy_version": policy_version,
        "eval_dataset": result.dataset,
        "eval_split": result.split,
        "eval_accuracy": result.accuracy,
        "eval_standard_error": result.standard_error,
        "eval_correct": result.correct,
        "eval_total": result.total,
        "eval_skills": {skill: result.skill_accuracy(skill) for skill in result.by_skill},  # e.g. carry, no-carry
        "eval_format_valid": result.format_valid,
        "eval_truncated": result.truncated,
        "eval_mean_completion_tokens": result.mean_completion_tokens,
        "eval_tokens_per_s": result.tokens_per_s,
        "eval_seconds": result.seconds,
    }


class EvalSchedule:
    """Evaluate at the first round asked about (unless not ``at_start``), then at the first round past each multiple
    of ``every`` (0: never). A plain round counter would miss multiples that a rounds-mode node jumps over."""

    def __init__(self, every: int, at_start: bool = True):
        self.every = every
        self.at_start = at_start
        self._last: int | None = None

    def due(self, round: int) -> bool:
        if self.every == 0:
            return False
        if self._last is None and not self.at_start:
            self._last = round  # the first round asked about counts as evaluated
        return self._last is None or round // self.every > self._last // self.every

    def done(self, round: int) -> None:
        self._last = round


class PeriodicEval:
    """When the join loop evaluates, with what settings, and the latest result (``last``)."""

    def __init__(self, node: RunningNode, echo: Callable[[str], None]):
        settings, generation = node.config.eval, node.config.generation
        self.schedule = EvalSchedule(settings.every, settings.at_start)
        self.split = settings.split or (held_out_split(node.task) if settings.every else None)
        self.limit = settings.limit
        self.max_new_tokens = settings.max_new_tokens or generation.max_new_tokens
        self.batch_size = settings.batch_size or generation.batch_size
        self.last: EvalResult | None = None  # the latest evaluation, for whoever shows it
        self._echo = echo

    def run_if_due(self, node: RunningNode, log: MetricsLog) -> EvalResult | None:
        """Evaluate ``node`` now if it is due before its next round; write and print the result."""
        if not self.schedule.due(node.round):
            return None
        result = evaluate(node.policy, node.task, self.split, limit=self.limit, batch_size=self.batch_size,
                          max_new_tokens=self.max_new_tokens, prompter=node.prompter, stop=node.stop)
        self.schedule.done(node.round)
        self.last = result
        version = node.trainer.policy_version
        log.write(eval_record(result, node.round, version))
        self._echo(f"round {node.round:>5}  v{version:<5} {summary_line(result)}")
        return result
