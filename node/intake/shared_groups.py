"""Horizontal grouping (docs/loss.md): every node generates its share G/k of the completions for each of
the round's shared prompts, and the advantage group of a prompt is the union of all their completions.

    merged = merge_shared([*own_groups, *peer_groups])
    trainer.step(merged.groups)

Groups with the same ``group_id`` (in horizontal mode derived from the run, the round and the prompt's
position, so identical on every node) get one ``advantage_key`` when they really are the same prompt:
the same task reference and the same prompt token ids as the first group seen with that id. A group
that claims the id but differs is kept apart (its own advantage group, as in vertical mode) and
counted. Put the node's own groups first: they are then the reference. Nothing else changes: each
completion keeps its group's off-policy flag and temperature, so this node's fresh samples stay
on-policy and its peers' are filtered, while the advantage is over all of them, filtered ones
included. The paper found this grouping biased and worse than vertical; it is an option.
"""

from dataclasses import dataclass, replace

import numpy as np

from ftis.node.trainer.groups import TrainingGroup


@dataclass(frozen=True)
class MergedGroups:
    groups: list[TrainingGroup]  # the input groups in order; those merged with others carry an advantage_key
    sizes: list[int]  # completions in each advantage group merged from more than one group
    mismatched: int  # groups whose id matched an earlier group's but whose task or prompt ids differed

    @property
    def merged(self) -> int:
        """Advantage groups formed from more than one group."""
        return len(self.sizes)


def merge_shared(groups: list[TrainingGroup]) -> MergedGroups:
    reference: dict[str, TrainingGroup] = {}
    members: dict[str, list[TrainingGroup]] = {}
    mismatched = 0
    for group in groups:
        first = reference.setdefault(group.group_id, group)
        if first is group or same_prompt(first, group):
            members.setdefault(group.group_id, []).append(group)
        else:
            mismatched += 1
    together = {id(group) for parts in members.values() if len(parts) > 1 for group in parts}
    return MergedGroups(
        groups=[replace(group, advantage_key=group.group_id) if id(group) in together else group
                for group in groups],
        sizes=[sum(group.size for group in parts) for parts in members.values() if len(parts) > 1],
        mismatched=mismatched,
    )


def same_prompt(a: TrainingGroup, b: TrainingGroup) -> bool:
    """Whether two groups answer the same problem from the same prompt tokens."""
    return a.task == b.task and a.prompt_ids.shape == b.prompt_ids.shape and bool(
        np.array_equal(a.prompt_ids, b.prompt_ids))
