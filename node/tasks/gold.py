"""The gold answer a receiving node scores a peer's group against.

Rewards are recomputed by the receiver from the completion text; the gold answer comes from:
1. the node's own copy of the task, when the group's task reference (dataset, split, index) names a
   problem it has — for synthetic tasks the dataset name spells the generation settings, so a peer
   with other settings does not match;
2. otherwise the batch's advisory answer, only when ``trust_peer_answers`` allows it;
3. otherwise nothing: the group is unusable (the caller skips and counts it).
"""

from dataclasses import dataclass
from typing import Literal

from ftis.node.tasks.base import Problem, Task, TaskError


@dataclass(frozen=True)
class Gold:
    answer: str | None  # None: the group is unusable
    source: Literal["own", "peer", "none"]
    # With an own copy: whether the batch's answer is the same string (False hints that the peer's
    # copy of the data set is ordered differently); None otherwise.
    agrees_with_batch: bool | None = None
    problem: Problem | None = None  # with an own copy: the problem itself (its prompt is checked against the group's)


def resolve_gold(
    task: Task, dataset: str, split: str, index: int, batch_answer: str, trust_peer_answers: bool
) -> Gold:
    """Where the gold answer for a peer's group comes from, and what it is."""
    if dataset == task.name:
        try:
            problem = task.problem(split, index)
        except TaskError:  # an unknown split or an index past our copy: not a problem we have
            pass
        else:
            own = problem.answer
            return Gold(own, "own", agrees_with_batch=own.strip() == batch_answer.strip(), problem=problem)
    if trust_peer_answers and batch_answer.strip():
        return Gold(batch_answer.strip(), "peer")
    return Gold(None, "none")


def gold_answer(
    task: Task, dataset: str, split: str, index: int, batch_answer: str, trust_peer_answers: bool
) -> str | None:
    """The gold answer for a peer's group, or None when the group is unusable (see ``resolve_gold``)."""
    return resolve_gold(task, dataset, split, index, batch_answer, trust_peer_answers).answer
