"""The fixed problems an evaluation scores: the same set in every evaluation, on every machine.

    from ftis.node.tasks.eval_set import fixed_problems
    problems = fixed_problems(make_task("arithmetic"), "test", 200)

Which problems: the first ``limit`` of a finite split, or all of it when ``limit`` is None. A synthetic split
(``task.size`` is None) has no first problems worth the name, so it is a fixed set of ``limit`` *distinct*
problems (``SYNTHETIC_DEFAULT_LIMIT`` when None): indices drawn from a hash of their rank (``fixed_indices``), a
problem whose question was already drawn skipped, so that a small problem space is not scored as a few problems
counted many times over. A smaller limit's set is a prefix of a larger one's, so evaluations during training
always score the same problems. A split with fewer distinct problems than asked for gives them all.

The evaluation (``evaluation/evaluation.py``, which checks the limit and refuses an empty split) and the warm-up's
greedy accuracy (``warmup/train.py``) both score these problems; ``limit`` here is at least 1 or None.
"""

import hashlib
import itertools
from collections.abc import Iterator

from ftis.node.tasks.base import Problem, Task

SYNTHETIC_DEFAULT_LIMIT = 500  # problems of an unbounded (synthetic) split when no limit is given
_INDEX_SPACE = 2**31  # synthetic indices are drawn below this, like the node's training prompts
_RANKS_PER_PROBLEM = 20  # a synthetic split whose space is exhausted: give up after this many draws per problem


def fixed_indices(size: int | None, limit: int | None) -> list[int]:
    """The indices scored in a split of ``size`` problems (None: synthetic, unbounded)."""
    if size is not None:
        return list(range(size if limit is None else min(limit, size)))
    count = SYNTHETIC_DEFAULT_LIMIT if limit is None else limit
    return list(itertools.islice(_hashed_indices(), count))


def fixed_problems(task: Task, split: str, limit: int | None) -> list[Problem]:
    """The problems scored in ``split`` of ``task``. Raises the task's errors for an unknown split or bad data."""
    size = task.size(split)
    if size is not None:
        return [task.problem(split, index) for index in fixed_indices(size, limit)]
    count = SYNTHETIC_DEFAULT_LIMIT if limit is None else limit
    distinct: dict[str, Problem] = {}
    for index in itertools.islice(_hashed_indices(), count * _RANKS_PER_PROBLEM):
        problem = task.problem(split, index)
        distinct.setdefault(problem.question, problem)
        if len(distinct) == count:
            break
    return list(distinct.values())


def _hashed_indices() -> Iterator[int]:
    """Distinct indices below ``_INDEX_SPACE`` from a hash of their rank, endlessly (a repeated draw, vanishingly
    rare, is skipped)."""
    seen: set[int] = set()
    for rank in itertools.count():
        digest = hashlib.blake2b(f"ftis-eval/{rank}".encode(), digest_size=8).digest()
        index = int.from_bytes(digest, "little") % _INDEX_SPACE
        if index not in seen:
            seen.add(index)
            yield index
