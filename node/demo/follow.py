"""Following a node's ``metrics.jsonl`` while the node writes it, and what the demo keeps of it.

    progress = NodeProgress("small", "tiny-small", "full")
    follower = MetricsFollower(out / "small" / "metrics.jsonl")
    for record in follower.read_new():
        progress.add(record)      # a step record or an evaluation record
    progress.latest_step, progress.evaluations

The node appends one JSON object per line and flushes each (``records/metrics.py``); a line the reader
meets half-written has no newline yet and is kept until it is complete. Step records carry
``own_groups``; evaluation records carry ``eval_total`` and no ``own_groups`` (``records/record_kinds.py``).
"""

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ftis.node.records.record_kinds import Record, is_evaluation, is_step


@dataclass(frozen=True)
class Evaluation:
    round: int  # the round it preceded (round 0: the warm start, before any GRPO step)
    accuracy: float
    policy_version: int
    skills: Mapping[str, float] = field(default_factory=dict)  # accuracy per skill (carry, no-carry), when named
    standard_error: float | None = None  # of ``accuracy`` (binomial, over the evaluation's problems)


@dataclass
class NodeProgress:
    """What the demo shows and sums up about one node."""

    name: str
    model: str
    adapter: str
    steps: list[Record] = field(default_factory=list)
    evaluations: list[Evaluation] = field(default_factory=list)

    def add(self, record: Record) -> None:
        if is_step(record):
            self.steps.append(record)
        elif is_evaluation(record):
            self.evaluations.append(Evaluation(record["round"], record["eval_accuracy"], record["policy_version"],
                                               record.get("eval_skills") or {}, record.get("eval_standard_error")))

    def extend(self, records: Iterable[Record]) -> None:
        for record in records:
            self.add(record)

    @property
    def latest_step(self) -> Record | None:
        return self.steps[-1] if self.steps else None

    @property
    def latest_evaluation(self) -> Evaluation | None:
        return self.evaluations[-1] if self.evaluations else None


def with_start_of(solo: NodeProgress, twin: NodeProgress) -> NodeProgress:
    """``solo`` with its swarm ``twin``'s first evaluation in front when it made none at that round: the solo run
    starts from the same model (same warm start and seed), whose evaluation, greedy on the same problems, is the
    same; the demo's solo runs do not make it again (``eval.at_start`` off)."""
    first = twin.evaluations[0] if twin.evaluations else None
    if first is None or (solo.evaluations and solo.evaluations[0].round <= first.round):
        return solo
    return replace(solo, evaluations=[first, *solo.evaluations])


class MetricsFollower:
    """New complete records of a ``metrics.jsonl`` file at each call; nothing while it does not exist."""

    def __init__(self, path: Path):
        self.path = path
        self._offset = 0
        self._partial = b""

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # b"" after a complete last line
        return [json.loads(line) for line in lines if line.strip()]


def read_progress(path: Path, name: str, model: str, adapter: str) -> NodeProgress:
    """A node's whole ``metrics.jsonl`` at once (the solo runs, read after they ended)."""
    progress = NodeProgress(name, model, adapter)
    progress.extend(MetricsFollower(path).read_new())
    return progress
