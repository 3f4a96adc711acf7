"""The prefix a batch of prompts shares, which a model runs once for all of them: the sampler's prompt pass
(``generation/hf.py``) and the trainer's log-prob pass (``trainer/packing.py``) both use it, so both agree on
when sharing pays."""

from collections.abc import Sequence

import numpy as np

MIN_SHARED_PREFIX = 8  # a shorter common prefix is not worth a pass of its own


def shared_prefix(prompts: Sequence[np.ndarray]) -> int:
    """How many first tokens all ``prompts`` share, leaving each at least one of its own (whose last position
    predicts its first completion token); 0 for fewer than two prompts or fewer than ``MIN_SHARED_PREFIX``."""
    if len(prompts) < 2:
        return 0
    first = np.asarray(prompts[0][: min(len(prompt) for prompt in prompts) - 1])
    shared = len(first)
    for prompt in prompts[1:]:
        differs = np.flatnonzero(np.asarray(prompt[:shared]) != first[:shared])
        if differs.size:
            shared = int(differs[0])
    return shared if shared >= MIN_SHARED_PREFIX else 0
