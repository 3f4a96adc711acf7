"""What a node fetches and holds of its peers' batches (``InboxLimits``), from ``[swarm]`` (``inbox_limits``)."""

import math
from dataclasses import dataclass

from ftis.node.config import SwarmConfig
from ftis.protocol.limits import MAX_ANNOUNCED_BATCHES


@dataclass(frozen=True)
class InboxLimits:
    max_age_s: float  # batches created longer ago are not fetched
    per_peer_quota: int  # batches of one peer in flight or queued
    max_batches: int  # batches in flight or queued, all peers
    max_bytes: int  # what they take in memory: in flight, the announced size; fetched, what decoding takes
    other_tokenizers: bool = True  # fetch batches of another tokenizer (their texts are trained on per sequence)
    # The longest completion text this node could train on, in UTF-8 bytes (``text_groups.usable_text_bytes``): a
    # batch of another tokenizer with a longer one is refused before its texts are inflated. None: the protocol's
    # bound alone (64 bytes a token).
    max_text_bytes: int | None = None
    poll_interval_s: float = 1.0  # how often the transport reads the announcements (``swarm.poll_interval_s``)

    @property
    def seen_per_peer(self) -> int:
        """The seen entries kept of one peer: as many batches as it can list at every poll for max_age_s."""
        return MAX_ANNOUNCED_BATCHES * max(1, math.ceil(self.max_age_s / self.poll_interval_s))


def inbox_limits(swarm: SwarmConfig) -> InboxLimits:
    """What a node fetches and holds of its peers' batches, from ``[swarm]``."""
    return InboxLimits(swarm.max_age_s, swarm.per_peer_quota, swarm.max_buffered_batches, swarm.max_buffered_bytes,
                       other_tokenizers=swarm.other_tokenizers == "sequence", poll_interval_s=swarm.poll_interval_s)
