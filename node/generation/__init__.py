"""ftis.node.generation: sampling groups of completions with their sampler log-probs (docs/loss.md).

Files:
- ``types.py``  the ``Generator`` interface (``generate``, and ``sync_weights``: the one way its weights
                change), ``GeneratedCompletion``, the request checks every backend applies.
- ``factory.py`` ``GENERATORS`` / ``make_generator``: the one table that names the backends, and the one way
                to build a generator (from a ``Policy`` and the ``[generation]`` settings).
- ``hf.py``     the transformers backend: ``TransformersGenerator`` (a batched, left-padded sampling
                loop with a KV cache) and ``greedy`` (argmax decoding for evaluation).
- ``draws.py``  ``processed_logprobs`` (the distribution a token is drawn from: logits / T, top-k, top-p — the
                trainer's recompute uses it too) and the draw from it with the drawn token's log-prob.
- ``vllm_backend.py`` ``VllmGenerator``: the vLLM backend (needs the ``[vllm]`` extra and a GPU): requests, reading
                vLLM's outputs (per-token processed log-probs), the weight sync's bookkeeping and its stats.
- ``vllm_engine.py``  starting the engine: the vLLM version required, in-process mode, ``logprobs_mode``, the
                memory share, the export of the current weights it starts from.
- ``vllm_sync.py``    the weight sync after an optimizer step: full weights in place, or a new LoRA adapter per version.
- ``sampler_copy.py`` ``SamplerCopy``: the sampler's bfloat16 or int8 copy of the policy (``[generation] weights``),
                brought to the trainer's weights after each step.
- ``stops.py``  ``StopStrings``: a completion ends at the token that completes a stop string (``[generation] stop``),
                one rule for every backend.
- ``fake.py``   ``FakeGenerator``: a fixed unigram policy in NumPy, for tests and demos with no model.

The sampling settings are ``ftis.protocol.SamplingSettings``. Importing this package does not import
torch, transformers or vLLM: ``hf.py`` loads the first two, building a ``VllmGenerator`` the third, so import
those modules directly, or build through ``make_generator("transformers" | "vllm" | "fake", policy, settings)``.
"""

from ftis.node.generation.factory import GENERATORS, make_generator
from ftis.node.generation.fake import FakeGenerator
from ftis.node.generation.types import GeneratedCompletion, Generator, check_request
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
