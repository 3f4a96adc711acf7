"""Which peers' groups a step trains on: at most ``limit`` groups and ``max_completions`` completions, fair across
peers, freshest first.

Peers take turns (round robin), each giving its freshest remaining group, the peer with the freshest
group first; so one chatty peer cannot crowd out the others, and stale groups are the ones left
over. One peer gives at most ``share`` of the limit (rounded up), even when no other peer has groups
left. A group that would take the step past ``max_completions``, or its peer past ``share`` of them, is passed
over (a peer may sample more completions a prompt than this node: the step's work stays what this node's settings
allow). Freshness is the
batch's creation time as the caller ranks it (a batch dated after it arrived ranks as the stalest: a peer that
dates its batches ahead gains no turn).

A group whose rewards are all equal teaches nothing (the trainer skips it) and takes no place: it is
left out before the limit applies, so fresh but uninformative groups cannot push informative ones
out. Not in horizontal grouping, where a peer's group joins other nodes' groups of the same prompt
before its advantage group is judged. A pure function: the caller decides what happens to the rest
(they are dropped: the next round brings fresher ones).
"""

import math
from collections import defaultdict
from dataclasses import dataclass

from ftis.node.trainer.groups import TrainingGroup, rewards_vary


@dataclass(frozen=True, eq=False)
class DatedGroup:
    group: TrainingGroup
    created_at: float  # of the batch that carried it


def select_peer_groups(candidates: list[DatedGroup], limit: int, *, vertical: bool = True,
                       share: float = 1.0, max_completions: int | None = None) -> list[DatedGroup]:
    """``vertical``: each group is its own advantage group, so one without reward variance is left out.
    ``share``: the most of ``limit`` one peer may give (rounded up), and of ``max_completions``. ``max_completions``:
    the most completions of all the chosen groups together (None: no bound)."""
    by_peer: dict[str, list[DatedGroup]] = defaultdict(list)
    for candidate in candidates:
        if not vertical or rewards_vary([candidate.group]):
            by_peer[candidate.group.peer_id].append(candidate)
    most = math.ceil(share * limit)
    if most < 1:
        return []
    queues = [sorted(queue, key=lambda c: -c.created_at)[:most] for queue in by_peer.values()]
    queues.sort(key=lambda queue: -queue[0].created_at)
    chosen: list[DatedGroup] = []
    room = max_completions if max_completions is not None else math.inf  # completions left, all peers
    rooms = [math.ceil(share * room) if max_completions is not None else math.inf for _ in queues]  # ...by peer
    turn = 0
    while len(chosen) < limit and any(queues):
        k = turn % len(queues)
        if queues[k]:
            candidate = queues[k].pop(0)
            size = candidate.group.size
            if size <= room and size <= rooms[k]:
                chosen.append(candidate)
                room -= size
                rooms[k] -= size
        turn += 1
    return chosen
