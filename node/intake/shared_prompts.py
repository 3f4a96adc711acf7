"""Horizontal grouping, the runner's side (docs/loss.md): all nodes of a run answer the same prompts in a
round, so that their completions for one prompt can form one advantage group (``intake/shared_groups.py``).

- ``shared_problems``: problem k of round r is drawn by an RNG seeded with (swarm_seed, r, k) alone, so
  every node with the same ``loop.swarm_seed``, task and split draws it, whatever its model seed or its
  ``prompts_per_round``. Draws are independent, so a finite split can repeat a problem within a round.
- ``shared_group_id``: that prompt's group id, ``run/round/k``, the same on every node (vertical ids start
  with the generating peer's id instead). Run ids hold no ``/``, so the parts cannot run together.

Merging the nodes' groups of one prompt into one advantage group is the trainer's concern
(``intake/shared_groups.py``); a peer's batch of a later round waits for that round in rounds mode
(``rounds_barrier.py``), which horizontal grouping requires.
"""

import numpy as np

from ftis.node.tasks import Problem, Task

_STREAM = 0x484F52  # tags the shared-prompt seeds, so they never coincide with a node's own RNG streams
_SYNTHETIC_INDICES = 2**31 - 1  # a synthetic task's problems are indexed by any non-negative int32


def shared_problems(task: Task, split: str, count: int, swarm_seed: int, round_: int) -> list[Problem]:
    size = task.size(split)
    high = _SYNTHETIC_INDICES if size is None else size
    indices = [np.random.default_rng([_STREAM, swarm_seed, round_, k]).integers(high) for k in range(count)]
    return [task.problem(split, int(index)) for index in indices]


def shared_group_id(run_id: str, round_: int, k: int) -> str:
    return f"{run_id}/{round_}/{k}"
