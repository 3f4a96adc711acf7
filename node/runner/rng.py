"""The random states a node's rounds draw from, captured and restored together.

    rng = node_rng(config.model.seed, transport.peer_id)
    state = RngState.capture(rng)   # the Node's numpy generator + python, torch CPU and CUDA
    state.restore(rng)              # later, or in a resumed process

The node's own numpy generator picks the problems and the generation seed of every round, so it alone
decides what the next round samples. It is seeded by the node's seed *and* its peer id: two nodes with the
same seed (every node that keeps the default) would otherwise answer the same prompts every round, and two
nodes of one model would sample the same completions; a node's peer id is its own (and stays across restarts
with ``[swarm] identity_path``). The global generators (python ``random``, torch's CPU and CUDA
ones) are captured as well so that any library code that draws from them also continues where it was.
``numpy`` and ``python`` are plain JSON-ready values; the torch states are byte tensors.
"""

import hashlib
import random
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


def node_rng(seed: int, peer_id: str) -> np.random.Generator:
    """The node's generator: from its seed and 64 bits of a hash of its peer id."""
    digest = hashlib.blake2b(peer_id.encode(), digest_size=8).digest()
    return np.random.default_rng([seed, 1, int.from_bytes(digest[:4], "little"), int.from_bytes(digest[4:], "little")])


class CudaRngNotRestored(UserWarning):
    """A checkpoint's CUDA RNG states were not restored: this process sees another number of GPUs."""


@dataclass(frozen=True)
class RngState:
    numpy: dict[str, Any]  # the node generator's ``bit_generator.state``
    python: list[Any]  # ``random.getstate()`` as lists: [version, [625 ints], gauss_next]
    torch_cpu: torch.Tensor  # uint8
    torch_cuda: tuple[torch.Tensor, ...]  # one per visible GPU; empty without CUDA

    @classmethod
    def capture(cls, generator: np.random.Generator) -> "RngState":
        version, internal, gauss_next = random.getstate()
        cuda = tuple(torch.cuda.get_rng_state_all()) if torch.cuda.is_available() else ()
        return cls(
            numpy=generator.bit_generator.state,  # a fresh dict: the generator keeps no reference to it
            python=[version, list(internal), gauss_next],
            torch_cpu=torch.get_rng_state(),
            torch_cuda=cuda,
        )

    def restore(self, generator: np.random.Generator) -> None:
        """Put every state back; ``generator`` must be of the same kind (PCG64) as the captured one."""
        generator.bit_generator.state = self.numpy
        version, internal, gauss_next = self.python
        random.setstate((version, tuple(internal), gauss_next))
        torch.set_rng_state(self.torch_cpu)
        if not self.torch_cuda:
            return
        if torch.cuda.is_available() and torch.cuda.device_count() == len(self.torch_cuda):
            torch.cuda.set_rng_state_all(list(self.torch_cuda))
        else:
            seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
            warnings.warn(f"the checkpoint holds CUDA RNG states for {len(self.torch_cuda)} GPU(s), this process "
                          f"sees {seen}: they are not restored (sampling draws from the node's own seeded "
                          "generator, so rounds are unaffected)", CudaRngNotRestored, stacklevel=2)
