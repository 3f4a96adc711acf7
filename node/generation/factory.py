"""Building a generator: ``GENERATORS``, the one table that names the backends, and ``make_generator``, the
one way every caller (the node, the experiment's cells, benchmarks, tests) gets a ``Generator``.

    generator = make_generator(config.generation.backend, policy, config.generation, seed=config.model.seed)

Every backend is built from the same three things: the ``Policy`` (the model it samples, or whose weights
it copies, and the tokenizer's end-of-sequence and padding ids and the text of its stop strings), the
``[generation]`` settings, and the node's seed. Each builder imports its backend only when called: naming the
table imports neither torch nor vLLM.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING

from ftis.node.config import GenerationConfig
from ftis.node.generation.types import Generator

if TYPE_CHECKING:
    from ftis.node.generation.stops import StopStrings
    from ftis.node.models import Policy


def stop_strings(policy: "Policy", settings: GenerationConfig) -> "StopStrings | None":
    """``[generation] stop`` in the policy's tokenizer (None when there are none)."""
    from ftis.node.generation.stops import StopStrings

    return StopStrings(policy.tokenizer, settings.stop) if settings.stop else None


def _transformers(policy: "Policy", settings: GenerationConfig, seed: int) -> Generator:
    """The built-in sampling loop over the trainer's own model (seeded per ``generate`` call, not here)."""
    from ftis.node.generation.hf import TransformersGenerator

    return TransformersGenerator(policy.model, eos_token_ids=policy.tokenizer.eos_token_id,
                                 pad_token_id=policy.tokenizer.pad_token_id, batch_size=settings.batch_size,
                                 stop=stop_strings(policy, settings), weights=settings.weights)


def _vllm(policy: "Policy", settings: GenerationConfig, seed: int) -> Generator:
    """A vLLM engine started now, on the trainer's GPU, from the policy's current weights."""
    from ftis.node.generation.vllm_backend import VllmGenerator

    return VllmGenerator(policy, settings.vllm, eos_token_ids=policy.tokenizer.eos_token_id, seed=seed,
                         stop=stop_strings(policy, settings))


def _fake(policy: "Policy", settings: GenerationConfig, seed: int) -> Generator:
    """A fixed unigram policy over the ids both the tokenizer and the model's embeddings know: samples that
    a node can decode, score and train on, with no forward pass (and log-probs that are not the model's)."""
    from ftis.node.generation.fake import FakeGenerator

    rows = int(policy.model.get_input_embeddings().weight.shape[0])
    return FakeGenerator(vocab_size=min(len(policy.tokenizer), rows), eos_token_id=policy.tokenizer.eos_token_id,
                         policy_seed=seed)


GeneratorBuilder = Callable[["Policy", GenerationConfig, int], Generator]

GENERATORS: dict[str, GeneratorBuilder] = {
    "transformers": _transformers,
    "vllm": _vllm,
    "fake": _fake,
}


def make_generator(backend: str, policy: "Policy", settings: GenerationConfig, *, seed: int = 0) -> Generator:
    """The ``backend`` generator for ``policy`` with the ``[generation]`` ``settings``, at policy version 0
    (a resumed node syncs it to its checkpoint's version). ``ValueError`` for a name not in ``GENERATORS``;
    ``BackendUnavailableError`` for one that cannot run here (vLLM not installed)."""
    try:
        build = GENERATORS[backend]
    except KeyError:
        raise ValueError(f"unknown generator {backend!r}; known: {', '.join(sorted(GENERATORS))}") from None
    return build(policy, settings, seed)
