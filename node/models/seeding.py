"""Random weights drawn from a seed, the same whichever threads build models at the same time.

torch's CPU generator is one per process. Two threads that each seed it and draw weights (the experiment
builds its models' warm starts side by side, a thread each) interleave their draws, and each gets weights
that neither seed alone gives: a warm start then depends on timing, not on its recipe. ``seeded`` holds
one process-wide lock while it seeds, draws and restores the generator's state.
"""

import contextlib
import threading
from collections.abc import Iterator, Sequence

import torch

_LOCK = threading.Lock()


@contextlib.contextmanager
def seeded(seed: int, devices: Sequence[torch.device] = ()) -> Iterator[None]:
    """Inside: torch's generators seeded with ``seed`` for this thread alone; after: their state as before."""
    with _LOCK, torch.random.fork_rng(devices=list(devices)):
        torch.manual_seed(seed)
        yield
