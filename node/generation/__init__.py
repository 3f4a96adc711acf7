"""ftis.node.generation: sampling groups of completions with their sampler log-probs (DESIGN §2).

Files:
- ``types.py``  the ``Generator`` interface, ``GeneratedCompletion``, the request checks every backend
                applies, and ``GENERATORS`` / ``make_generator``: the one table that names the backends.
- ``hf.py``     the transformers backend: ``TransformersGenerator`` (a batched, left-padded sampling
                loop with a KV cache), ``processed_logprobs`` (the distribution a token is drawn from:
                logits / T, top-k, top-p — the trainer's recompute uses it too), and ``greedy``
                (argmax decoding for evaluation).
- ``fake.py``   ``FakeGenerator``: a fixed unigram policy in NumPy, for tests and demos with no model.

The sampling settings are ``ftis.protocol.SamplingSettings``. Importing this package does not import
torch or transformers: ``hf.py`` loads them, so import it directly (or build through
``make_generator("transformers", ...)``).
"""

from ftis.node.generation.fake import FakeGenerator
from ftis.node.generation.types import GENERATORS, GeneratedCompletion, Generator, check_request, make_generator
from ftis.protocol import SamplingSettings

__all__ = [
    "GENERATORS",
    "FakeGenerator",
    "GeneratedCompletion",
    "Generator",
    "SamplingSettings",
    "check_request",
    "make_generator",
]
