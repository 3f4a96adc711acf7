"""A sampled directory and a fetch budget: what a node reads of the swarm and which batches it fetches.

A node trains on a handful of peers' batches a step, not on the swarm: it needs to see enough fresh
announcements to choose them, not all of them. So (docs/swarm.md, "How a node reads a large swarm"):

- **Reads sample** (``ShardOrder``, ``Sampler``). Each poll reads the next ``per_poll`` (K) shards of the
  node's own random order of all S, so it covers every shard once every S/K polls and two nodes read
  different shards at the same time. K = S reads everything every poll (a small swarm, the default).
  When the node remembers fewer than ``want_peers`` peers (a run smaller than planned, or a quiet one), the
  next poll reads twice as many shards, up to ``most_per_poll``; back to K once it sees enough.
- **Bounded memory** (``Sampler.remember``/``listings``): what the last ``remember_polls`` polls returned,
  the newest listing of each peer; older reads are forgotten whatever N is.
- **A fetch budget** (``exchange/budget.py``: ``rank_offers``, ``pick``): the batches a node fetches are chosen
  among those its memory lists, freshest first (a peer whose score says it sent something bad ranks after all others);
  creation times in the same ``tie_s`` slice of age count as equal and are taken better-scored first, then in
  random order (so nodes that see the same fresh batches spread their
  fetches over them instead of all taking the same one); one per peer at a time (distinct peers), each
  accepted by the caller's policy (the ``Inbox``: age, run, tokenizer, mutes, once only), up to the room
  the budget leaves. A batch dated ahead of the node's clock ranks as the stalest; one older than a horizon
  (``fetch_horizon_s``) is not taken: the budget waits for fresher ones, which a node reading a sample of a
  large swarm sees every poll.

Pure Python (no hivemind): ``HivemindTransport`` and ``MemoryTransport`` drive it, and so does the policy
simulation, ``benchmarks/swarm_policy.py``.
"""

import random
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ftis.node.config import SwarmConfig

Item = TypeVar("Item")


class ShardOrder:
    """The node's own random order of the run's S shards, read K at a time, round and round."""

    def __init__(self, shards: int, rng: random.Random):
        if shards < 1:
            raise ValueError(f"shards must be ≥ 1, got {shards}")
        self._order = list(range(shards))
        rng.shuffle(self._order)
        self._next = 0

    def take(self, count: int) -> list[int]:
        """The next ``count`` shards of the order (all of them, each once, when ``count`` ≥ S)."""
        shards = len(self._order)
        count = max(0, min(count, shards))
        taken = [self._order[(self._next + i) % shards] for i in range(count)]
        self._next = (self._next + count) % shards
        return taken


@dataclass(frozen=True)
class ReadSettings:
    shards: int  # S: the run's shard keys
    per_poll: int  # K: shards a poll reads; S reads everything
    most_per_poll: int  # the most a poll reads when the node sees too few peers (≥ K)
    remember_polls: int  # reads remembered: the newest listing of each peer they returned
    want_peers: int  # fewer peers remembered than this: the next poll reads more


def read_settings(swarm: SwarmConfig) -> ReadSettings:
    """How polls sample the shards, from ``[swarm]``."""
    per_poll = swarm.shards_per_poll or swarm.shards
    return ReadSettings(shards=swarm.shards, per_poll=per_poll, most_per_poll=swarm.max_shards_per_poll or per_poll,
                        remember_polls=swarm.remember_polls, want_peers=swarm.want_peers)


class Sampler(Generic[Item]):
    """Which shards each poll reads, and what the last polls returned (the newest item of each peer)."""

    def __init__(self, settings: ReadSettings, rng: random.Random):
        self.settings = settings
        self._order = ShardOrder(settings.shards, rng)
        self._count = min(settings.per_poll, settings.shards)
        self._poll = 0
        self._memory: OrderedDict[str, tuple[int, Item]] = OrderedDict()  # peer -> (poll it was read in, item)

    def shards_to_read(self) -> list[int]:
        """This poll's shards: K of the order, more (doubling, within ``most_per_poll``) while the node
        remembers fewer than ``want_peers`` peers."""
        s = self.settings
        if len(self._memory) < s.want_peers:
            self._count = min(max(self._count * 2, s.per_poll), s.most_per_poll, s.shards)
        else:
            self._count = min(s.per_poll, s.shards)
        return self._order.take(self._count)

    def remember(self, items: Iterable[tuple[str, Item]]) -> None:
        """What this poll read, by peer; forgets what polls older than ``remember_polls`` returned."""
        self._poll += 1
        for peer_id, item in items:
            self._memory[peer_id] = (self._poll, item)
            self._memory.move_to_end(peer_id)
        oldest = self._poll - self.settings.remember_polls
        expired = []
        for peer_id, (poll, _) in self._memory.items():  # oldest first: each read moves its peers to the end
            if poll > oldest:
                break
            expired.append(peer_id)
        for peer_id in expired:
            del self._memory[peer_id]

    def listings(self) -> dict[str, Item]:
        """The newest item of each peer the remembered polls returned."""
        return {peer_id: item for peer_id, (_, item) in self._memory.items()}

    def __len__(self) -> int:
        return len(self._memory)
