"""The generator interface every backend implements, what it returns, and the checks every backend applies.

A generator turns P prompts (token id arrays) into P groups of G completions and records, for every
sampled token, its ``sampler_logprobs`` (docs/loss.md): the log-prob under the distribution the token
was actually drawn from — logits / T, then the top-k and top-p masks, renormalised (π_gen,
``draws.processed_logprobs``). The trainer's π_θ is the model at the temperature alone; the ratio of the two
is the IS weight (docs/loss.md), 1 for a node's own fresh samples only when top-k and top-p are off.

The sampling settings are the protocol's ``SamplingSettings``: the ones a batch carries on the wire
are exactly the ones its completions were sampled with.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from ftis.node.errors import UserError
from ftis.protocol import Completion, SamplingSettings

FinishReason = Literal["stop", "length"]


class GenerationBackendError(UserError, RuntimeError):
    """A generation backend that cannot serve: not installed, misconfigured, or failing mid-run."""


class BackendUnavailableError(GenerationBackendError):
    """The backend named cannot be used here (e.g. vLLM is not installed, or too old)."""


class WeightSyncError(GenerationBackendError):
    """The engine could not take the trainer's new weights: nothing is generated with the old ones."""


@dataclass(frozen=True, eq=False)
class GeneratedCompletion:
    """One sampled completion. ``finish_reason`` is "stop" when the generator sampled an end-of-sequence
    token (then the last id is that token and no id before it is one) or completed a stop string (``stops.py``:
    the last id completes it), and "length" when it reached ``max_new_tokens`` without either. Nothing sampled after
    the end is kept."""

    token_ids: np.ndarray  # (n,) int64, 1 ≤ n ≤ max_new_tokens
    sampler_logprobs: np.ndarray  # (n,) float32, ≤ 0, finite
    finish_reason: FinishReason

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids.shape[0])

    def to_completion(self, reward: float, text: str | None = None) -> Completion:
        """The wire form, with the generator's (advisory) reward and its text (decoded without special tokens)."""
        return Completion(self.token_ids, self.sampler_logprobs, float(reward), self.finish_reason, text)


class Generator(Protocol):
    """Samples groups of completions with the trainer's weights. Implementations: ``TransformersGenerator``
    (``hf.py``), ``VllmGenerator`` (``vllm_backend.py``), ``FakeGenerator`` (``fake.py``); build one with
    ``factory.make_generator``.

    Its weights change only through ``sync_weights``: whoever updates the trainer's weights (the node, after
    an optimizer step or a checkpoint's resume) calls it, and ``policy_version`` can be read, never set."""

    @property
    def policy_version(self) -> int:
        """The optimizer steps of the weights it generates with."""
        ...

    def sync_weights(self, policy_version: int) -> None:
        """The trainer's weights are now ``policy_version``: generate with them from here on. A backend with
        weights of its own (vLLM's engine) copies them now, and raises ``WeightSyncError`` if it cannot; one
        that samples the trainer's model itself (transformers) only records the number."""
        ...

    def generate(
        self,
        prompts: list[np.ndarray],
        num_completions: int,
        sampling: SamplingSettings,
        seed: int | None = None,
    ) -> list[list[GeneratedCompletion]]:
        """``num_completions`` (G) completions for each prompt: one list of G per prompt, in order.

        ``prompts`` are 1-D arrays of token ids, each non-empty; the completions condition on exactly
        these ids. ``sampling.temperature`` must be > 0 (greedy decoding is an evaluation helper, not a
        sampler). With the same ``seed``, inputs and backend settings the result is the same; with
        ``seed=None`` it is drawn fresh.
        """
        ...


def check_request(prompts: list[np.ndarray], num_completions: int, sampling: SamplingSettings) -> None:
    """``ValueError`` for a request no backend can serve; every backend calls it first."""
    if num_completions < 1:
        raise ValueError(f"num_completions must be ≥ 1, got {num_completions}")
    if not sampling.temperature > 0:  # also refuses NaN
        raise ValueError(f"temperature must be > 0 for sampling (greedy is `greedy`), got {sampling.temperature}")
    if not 0 < sampling.top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {sampling.top_p}")
    if sampling.top_k < 0:
        raise ValueError(f"top_k must be ≥ 0 (0 = off), got {sampling.top_k}")
    if sampling.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be ≥ 1, got {sampling.max_new_tokens}")
    for i, prompt in enumerate(prompts):
        prompt = np.asarray(prompt)
        if prompt.ndim != 1 or prompt.size == 0 or prompt.dtype.kind not in "iu":
            raise ValueError(f"prompts[{i}] must be a non-empty 1-D array of token ids")


def stop_token_ids(model: Any, eos_token_ids: int | Sequence[int] | None) -> frozenset[int]:
    """The ids every backend stops at: those given, plus the end-of-sequence ids of the model's generation
    config and config (vLLM reads the generation config's and stops there whatever the request says, and an
    instruct model lists several: Qwen2.5-Instruct's are <|im_end|> and <|endoftext|>)."""
    given = [] if eos_token_ids is None else [eos_token_ids] if isinstance(eos_token_ids, int | np.integer) \
        else list(eos_token_ids)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    found: list[int] = [int(i) for i in given]
    for config in (getattr(base, "generation_config", None), getattr(base, "config", None)):
        ids = getattr(config, "eos_token_id", None)
        if ids is not None:
            found += [int(ids)] if isinstance(ids, int | np.integer) else [int(i) for i in ids]
    if not found:
        raise ValueError("no eos_token_ids given and the model's config names none")
    return frozenset(found)
