"""Which prompts a node answers in a round, and how its own and its peers' groups become advantage groups:
the two groupings (``loop.grouping``, docs/loss.md), each in one place, chosen from ``GROUPINGS``.

- ``VerticalGrouping`` (the default): each node draws its own prompts with its own RNG; a group is its own
  advantage group, so a peer's group without reward variance teaches nothing and takes no place in the mix.
- ``HorizontalGrouping`` (rounds mode only): every node draws the round's shared prompts
  (``shared_prompts.py``), and the groups of one prompt from all nodes form one advantage group
  (``intake/shared_groups.py``); a peer's group is judged only once merged, so none is left out before.
"""

from dataclasses import dataclass

import numpy as np

from ftis.node.config import NodeConfig
from ftis.node.intake.peer_selection import DatedGroup, select_peer_groups
from ftis.node.intake.shared_groups import MergedGroups, merge_shared
from ftis.node.intake.shared_prompts import shared_group_id, shared_problems
from ftis.node.tasks import Problem, Task
from ftis.node.trainer.groups import TrainingGroup


@dataclass(frozen=True)
class Grouped:
    chosen: list[DatedGroup]  # the peers' groups the step trains on
    merged: MergedGroups  # own groups first, then the chosen ones: the step's groups


class VerticalGrouping:
    def __init__(self, config: NodeConfig, task: Task, rng: np.random.Generator):
        self.config, self.task, self._rng = config, task, rng

    def problems(self, round_: int) -> list[Problem]:
        split, count = self.config.task.split, self.config.generation.prompts_per_round
        size = self.task.size(split)
        if size is None:  # a synthetic task: any index is a problem
            indices = self._rng.integers(0, 2**31 - 1, size=count)
        else:
            indices = self._rng.choice(size, size=count, replace=size < count)
        return [self.task.problem(split, int(index)) for index in indices]

    def group_id(self, peer_id: str, round_: int, k: int) -> str:
        return f"{peer_id}/{round_}/{k}"

    def groups(self, own: list[TrainingGroup], peers: list[DatedGroup]) -> Grouped:
        chosen = self._select(peers, vertical=True)
        groups = [*own, *(c.group for c in chosen)]
        return Grouped(chosen, MergedGroups(groups, [], 0))

    def _select(self, peers: list[DatedGroup], vertical: bool) -> list[DatedGroup]:
        mix = self.config.mix
        return select_peer_groups(peers, mix.max_peer_groups, vertical=vertical, share=mix.max_peer_share,
                                  max_completions=mix.max_peer_groups * self.config.generation.group_size)


class HorizontalGrouping(VerticalGrouping):
    def problems(self, round_: int) -> list[Problem]:
        config = self.config
        return shared_problems(self.task, config.task.split, config.generation.prompts_per_round,
                               config.loop.swarm_seed, round_)

    def group_id(self, peer_id: str, round_: int, k: int) -> str:
        return shared_group_id(self.config.swarm.run_id, round_, k)

    def groups(self, own: list[TrainingGroup], peers: list[DatedGroup]) -> Grouped:
        chosen = self._select(peers, vertical=False)
        return Grouped(chosen, merge_shared([*own, *(c.group for c in chosen)]))  # own first: the reference


GROUPINGS = {"vertical": VerticalGrouping, "horizontal": HorizontalGrouping}
