"""What the trainer trains on: groups of completions with this node's rewards and a flag saying
whether the filter applies to them (DESIGN §2)."""

from dataclasses import dataclass

import numpy as np

from ftis.protocol.schema import CompletionColumns


@dataclass(frozen=True, eq=False)
class TrainingGroup:
    group_id: str
    peer_id: str  # who generated it: this node's own id for its own groups
    prompt_ids: np.ndarray  # (p,) int64, exactly what the generator conditioned on
    completions: CompletionColumns  # ids and sampler log-probs, one after another
    rewards: np.ndarray  # (G,) float, recomputed by this node from the completion text
    off_policy: bool  # peers' groups and this node's stale ones (all of them with filter_local)
    temperature: float  # the sampler's: log-probs are compared under the same temperature

    @property
    def size(self) -> int:
        return len(self.completions)

    @property
    def num_tokens(self) -> int:
        """Prompt plus completion tokens of all its sequences: what a forward pass costs."""
        return int(self.completions.lengths.sum()) + self.size * len(self.prompt_ids)

    @property
    def informative(self) -> bool:
        """Whether its rewards differ: a group whose rewards are all equal teaches nothing."""
        return bool(self.rewards.size) and bool(np.ptp(self.rewards) > 0)
