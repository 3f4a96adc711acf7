"""The intake's door: which of a peer's groups a round goes on to pay for, decided from the batch's shape alone,
with bounds taken from this node's own settings.

The inbox bounds what peers' batches take in memory while they are fetched, decoded and queued
(``swarm/exchange/inbox.py``). From here on every group costs work per token: its ids decoded to text, its reward
computed, another tokenizer's texts tokenized again, its forward and backward passes. ``Admission.admit`` looks
at each group's lengths and counts (no work per token) and lets through only what this node could have asked for:

- **Completion length.** A completion longer than this node samples itself (``generation.max_new_tokens``) is
  never scored or trained on: its group is left out and its batch charged once (``TOO_LONG``). Another
  tokenizer's group counts in other tokens; its texts are bounded instead, at what this node could train on
  once they are tokenized here (``text_groups.usable_text_bytes``, in characters).
- **Completions a step scores.** At most ``max_scored`` of the peers' completions a step, all peers together,
  and ``max_scored_per_peer`` from one peer (``StepBudget``); peers take turns group by group, in the order their
  batches arrived. A group past either bound is left unscored, counted and not charged: a busy swarm sends more
  than a step uses. ``max_scored`` is ``SCORING_HEADROOM`` times the completions a step trains on from its peers
  (``mix.max_peer_groups`` × ``generation.group_size``): the mix leaves out groups without reward variance, so a
  step scores more than it trains on. The per-peer bound is ``mix.max_peer_share`` of it, rounded up.

A group let through may still be unusable (no gold answer this node trusts, a prompt that is not its problem's,
an id outside the vocabulary: ``scoring.py``), and scoring it is bounded in time per step (``mix.max_scoring_s``).
Its prompt is bounded there too, once its gold answer is resolved: one of this node's problems must come with this
node's own prompt for it, and a group of a problem it lacks (trained on only with ``task.trust_peer_answers``) with
rows, prompt and completion, that fit one forward pass (``trainer.max_tokens_per_microbatch``), else ``TOO_LONG``.
What a step trains on is bounded in the mix (``peer_selection.py``: groups and completions) and in each forward
pass (``trainer/packing.py``: ``max_tokens_per_microbatch``, an advantage group split across passes when needed).
"""

import math
from collections import defaultdict, deque
from dataclasses import dataclass, field, replace

from ftis.node.config import NodeConfig
from ftis.node.intake.text_groups import MAX_CHARACTERS_PER_TOKEN, RETOKENIZED_PER_TOKEN
from ftis.node.swarm.transport import ReceivedBatch
from ftis.protocol import Group

# A step scores this many times the completions it may train on from its peers.
SCORING_HEADROOM = 4


@dataclass(frozen=True)
class AdmissionLimits:
    max_completion_tokens: int  # a completion's tokens in this node's tokenizer: its own generation.max_new_tokens
    max_text_characters: int  # ...and another tokenizer's completion text, in characters
    max_scored: int  # peers' completions one step scores, all peers
    max_scored_per_peer: int  # ...from one peer

    @classmethod
    def of(cls, config: NodeConfig) -> "AdmissionLimits":
        generation, mix = config.generation, config.mix
        max_scored = SCORING_HEADROOM * mix.max_peer_groups * generation.group_size
        return cls(
            max_completion_tokens=generation.max_new_tokens,
            max_text_characters=MAX_CHARACTERS_PER_TOKEN * RETOKENIZED_PER_TOKEN * generation.max_new_tokens,
            max_scored=max_scored,
            max_scored_per_peer=math.ceil(mix.max_peer_share * max_scored),
        )


@dataclass
class StepBudget:
    """What one step has left to score: completions in all, and by peer."""

    limits: AdmissionLimits
    scored: int = 0
    by_peer: dict[str, int] = field(default_factory=dict)

    def take(self, peer_id: str, completions: int) -> bool:
        """Whether ``completions`` more of ``peer_id``'s fit, taking them if so."""
        mine = self.by_peer.get(peer_id, 0)
        if (self.scored + completions > self.limits.max_scored
                or mine + completions > self.limits.max_scored_per_peer):
            return False
        self.scored += completions
        self.by_peer[peer_id] = mine + completions
        return True


@dataclass(frozen=True)
class Admitted:
    received: list[ReceivedBatch]  # each batch with only its admitted groups (maybe none), in arrival order
    too_long: list[str]  # the peer of each batch that held a group too long for this node (charged once a batch)
    unscored: int  # groups left out for the step's budget


class Admission:
    def __init__(self, limits: AdmissionLimits, fingerprint: str):
        """``fingerprint``: this node's tokenizer's (another's groups are bounded by their texts)."""
        self.limits, self._fingerprint = limits, fingerprint

    def budget(self) -> StepBudget:
        """A step's budget, none of it spent."""
        return StepBudget(self.limits)

    def admit(self, received: list[ReceivedBatch], budget: StepBudget) -> Admitted:
        """``received`` with each batch's groups cut to those within this node's bounds and ``budget``, which
        they are charged to."""
        kept: list[list[Group]] = [[] for _ in received]
        too_long: list[str] = []
        queues: dict[str, deque[tuple[int, Group]]] = defaultdict(deque)  # peer -> its groups within the bounds
        for b, item in enumerate(received):
            fits = [group for group in item.batch.groups if self._fits(item, group)]
            if len(fits) < len(item.batch.groups):
                too_long.append(item.peer_id)
            queues[item.peer_id].extend((b, group) for group in fits)
        unscored = 0
        turn = [queue for queue in queues.values() if queue]
        while turn:  # peers take turns, a group each, so none crowds the others out of the budget
            for queue in turn:
                b, group = queue.popleft()
                if budget.take(received[b].peer_id, group.size):
                    kept[b].append(group)
                else:
                    unscored += 1
            turn = [queue for queue in turn if queue]
        return Admitted([item if len(groups) == len(item.batch.groups)
                         else replace(item, batch=replace(item.batch, groups=tuple(groups)))
                         for item, groups in zip(received, kept, strict=True)], too_long, unscored)

    def _fits(self, item: ReceivedBatch, group: Group) -> bool:
        """Whether the group's completions are no longer than this node trains on."""
        columns = group.columns
        if item.batch.tokenizer.fingerprint == self._fingerprint:
            return int(columns.lengths.max(initial=0)) <= self.limits.max_completion_tokens
        texts = columns.texts
        return texts is None or max(map(len, texts), default=0) <= self.limits.max_text_characters
