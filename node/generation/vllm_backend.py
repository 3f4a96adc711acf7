"""The vLLM generation backend: ``VllmGenerator``, the ``Generator`` of a vLLM engine on the trainer's GPU.

    generator = VllmGenerator(policy, VllmConfig(gpu_memory_utilization=0.3), seed=0)
    groups = generator.generate(prompts, num_completions=8, sampling=SamplingSettings(1.0, 1.0, 0, 256), seed=step)
    generator.sync_weights(trainer.policy_version)  # after each optimizer step, as the node does

Needs the ``[vllm]`` extra (vLLM ≥ 0.10.2) and a GPU; importing this module imports neither vLLM nor
torch's CUDA side — the engine starts when the generator is built (``vllm_engine.py`` says which options
and why, notably ``logprobs_mode="processed_logprobs"``).

**A request.** Each prompt becomes one vLLM request for G samples (``SamplingParams(n=G)``) with the
node's temperature, top-p and top-k (vLLM's "off" is -1), ``max_tokens = max_new_tokens``, the sampled
token's log-prob only (``logprobs=0``), the end-of-sequence ids as stop tokens, and no detokenisation.
With a seed, prompt i gets seed b + i·G, where b is drawn from the seed: vLLM seeds sample j of a request
with (its seed + j), so every sample of a call has a seed of its own. vLLM's sampler draws with its own
kernels, so a seed reproduces vLLM's samples (on one engine, for one batch), not the transformers backend's.

**What comes back.** Per sample: its token ids, each one's log-prob under the distribution it was drawn
from (logits / T, then top-k and top-p, renormalised: ``processed_logprobs``), and the finish reason —
"stop" when the last id is one of the stop ids (the model's end-of-sequence ids: those given, plus the
ones its generation config and config name, at which vLLM stops too), "length" when ``max_new_tokens`` (or the
engine's ``max_model_len``) cut it. A sample whose end-of-sequence id falls exactly on its
``max_new_tokens``-th token is a "stop" (vLLM from 0.10.2 until vllm-project/vllm PR #27555 reports it as
"length"; over hundreds of rounds that happens, and the node must not stop on it). Anything else — an
aborted request, missing or non-finite log-probs — raises ``VllmOutputError``: a batch with made-up
log-probs must not reach the swarm. The transformers backend stops at the same ids (``types.stop_token_ids``).

**Weights.** The engine starts with the policy's weights: full fine-tuning from an export of them
(``vllm_engine.py``), LoRA from the base plus the policy's adapter, handed over before the constructor
returns. They change only when the node calls ``sync_weights(version)`` after an optimizer step (or a
checkpoint's resume): that call copies the trainer's weights into the engine there and then (``vllm_sync.py``:
full weights in place, or the new LoRA adapter), and is a no-op for the version the engine holds. ``generate``
never syncs: it samples with what the engine holds. A failed sync raises ``WeightSyncError`` and leaves the
engine's weights no version's; ``generate`` then refuses until a sync succeeds, so nothing is sampled with
weights other than ``policy_version``'s. ``stats()`` says how many syncs ran, how long they took, and the
version the engine holds.
"""

import shutil
import tempfile
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ftis.node.config import VllmConfig
from ftis.node.generation.stops import StopStrings
from ftis.node.generation.types import (
    GeneratedCompletion,
    GenerationBackendError,
    WeightSyncError,
    check_request,
    stop_token_ids,
)
from ftis.protocol import SamplingSettings


class VllmOutputError(GenerationBackendError):
    """vLLM returned a sample this backend cannot vouch for (no log-probs, an aborted request, ...)."""


@dataclass(frozen=True)
class VllmStats:
    engine_policy_version: int | None  # the version whose weights the engine holds (None: a sync failed)
    weight_syncs: int  # LoRA: the first adapter, handed over at the start, is one
    weight_sync_seconds: float  # all syncs together
    generations: int  # generate calls


class VllmGenerator:
    """The ``Generator`` over a vLLM engine holding ``policy``'s weights (see the module docstring)."""

    def __init__(
        self,
        policy: Any,
        settings: VllmConfig | None = None,
        *,
        eos_token_ids: int | Sequence[int] | None = None,
        seed: int = 0,
        policy_version: int = 0,
        stop: StopStrings | None = None,
    ):
        from ftis.node.generation.vllm_engine import import_vllm, start_engine
        from ftis.node.generation.vllm_sync import FullWeightSync, LoraWeightSync

        settings = settings or VllmConfig()
        self._vllm = import_vllm()  # refuses a missing or too old vLLM before anything is written
        self.stop_ids = stop_token_ids(policy.model, eos_token_ids)
        self.stop = stop  # stop strings: the engine runs without a tokenizer, so completions are cut afterwards
        if settings.scratch_dir is None:
            self.scratch = Path(tempfile.mkdtemp(prefix="ftis-vllm-"))
            self._remove_scratch = weakref.finalize(self, shutil.rmtree, self.scratch, ignore_errors=True)
        else:
            self.scratch = Path(settings.scratch_dir).expanduser()
            self.scratch.mkdir(parents=True, exist_ok=True)
            self._remove_scratch = None
        self.llm = start_engine(policy, settings, self.scratch, seed, policy_version)
        self._policy_version = int(policy_version)
        self._syncs, self._sync_seconds, self._generations = 0, 0.0, 0
        if policy.adapter == "full":
            self._sync: Any = FullWeightSync(self.llm, policy.model)
            self._engine_version: int | None = self._policy_version  # started from an export of these weights
        else:
            from vllm.lora.request import LoRARequest

            self._sync = LoraWeightSync(self.llm, policy.model, self.scratch, LoRARequest)
            self._engine_version = None  # the base alone; the policy's adapter goes in now (a warm start's is not
            # the identity)
            try:
                self.sync_weights(self._policy_version)
            except BaseException:
                self.close()
                raise

    @property
    def policy_version(self) -> int:
        """The version the trainer's weights were last synced as (the engine's, unless that sync failed)."""
        return self._policy_version

    def sync_weights(self, policy_version: int) -> None:
        """The trainer's weights are now ``policy_version``: copy them into the engine now, unless it holds
        that version already. ``WeightSyncError`` if it cannot; ``generate`` refuses until a sync succeeds."""
        from ftis.node.generation.vllm_sync import timed_sync

        self._policy_version = int(policy_version)
        if self._engine_version == self._policy_version:
            return
        self._engine_version = None  # until the sync has finished, the engine's weights are nobody's version
        self._sync_seconds += timed_sync(self._sync, self._policy_version)
        self._syncs += 1
        self._engine_version = self._policy_version

    def generate(
        self,
        prompts: list[np.ndarray],
        num_completions: int,
        sampling: SamplingSettings,
        seed: int | None = None,
    ) -> list[list[GeneratedCompletion]]:
        check_request(prompts, num_completions, sampling)
        if self._engine_version != self._policy_version:  # only after a failed sync
            raise WeightSyncError(f"the engine holds no policy version since a failed weight sync: "
                                  f"sync_weights({self._policy_version}) must succeed before it generates")
        seeds = request_seeds(seed, len(prompts), num_completions)
        params = [self._sampling_params(num_completions, sampling, s) for s in seeds]
        requests = [{"prompt_token_ids": [int(t) for t in prompt]} for prompt in prompts]
        outputs = self.llm.generate(requests, params, use_tqdm=False, lora_request=self._sync.lora_request)
        self._generations += 1
        if len(outputs) != len(prompts):
            raise VllmOutputError(f"vLLM answered {len(outputs)} of {len(prompts)} requests")
        return [self._group(output, num_completions, sampling.max_new_tokens) for output in outputs]

    def stats(self) -> VllmStats:
        return VllmStats(self._engine_version, self._syncs, self._sync_seconds, self._generations)

    def close(self) -> None:
        """Drop the engine (its GPU memory goes with the last reference) and the scratch folder if it is ours."""
        self._sync.close()
        self._sync.llm = self.llm = None
        if self._remove_scratch is not None:
            self._remove_scratch()

    def _sampling_params(self, n: int, sampling: SamplingSettings, seed: int | None) -> Any:
        return self._vllm.SamplingParams(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k > 0 else -1,  # -1 is "off" in every vLLM; 0 only in newer ones
            seed=seed,
            max_tokens=sampling.max_new_tokens,
            logprobs=0,  # the sampled token's log-prob, nothing more
            stop_token_ids=sorted(self.stop_ids),
            detokenize=False,
        )

    def _group(self, output: Any, num_completions: int, max_new_tokens: int) -> list[GeneratedCompletion]:
        samples = sorted(output.outputs, key=lambda sample: sample.index)
        if len(samples) != num_completions:
            raise VllmOutputError(f"vLLM returned {len(samples)} samples for a request of {num_completions}")
        generated = [to_generated(sample, self.stop_ids, max_new_tokens) for sample in samples]
        return generated if self.stop is None else [cut_at_stop(completion, self.stop) for completion in generated]


def to_generated(sample: Any, stop_ids: frozenset[int], max_new_tokens: int) -> GeneratedCompletion:
    """One vLLM ``CompletionOutput`` as a ``GeneratedCompletion`` (see "What comes back" above)."""
    token_ids = np.asarray(list(sample.token_ids), dtype=np.int64)
    n = token_ids.shape[0]
    if not 1 <= n <= max_new_tokens:
        raise VllmOutputError(f"a sample of {n} tokens (max_new_tokens {max_new_tokens})")
    per_position = sample.logprobs
    if per_position is None or len(per_position) != n:
        raise VllmOutputError(f"vLLM returned {0 if per_position is None else len(per_position)} log-probs "
                              f"for {n} tokens (were they requested?)")
    try:
        values = np.array([per_position[t][int(token)].logprob for t, token in enumerate(token_ids)], np.float64)
    except KeyError as error:
        raise VllmOutputError(f"vLLM returned no log-prob for sampled token {error}") from None
    if not np.isfinite(values).all():
        raise VllmOutputError("vLLM returned a non-finite log-prob for a sampled token")
    reason = sample.finish_reason
    if reason not in ("stop", "length"):
        raise VllmOutputError(f"a sample finished with {reason!r} (aborted?)")
    is_stop = np.isin(token_ids, sorted(stop_ids))  # (n,)
    if reason == "length" and bool(is_stop[-1]) and n == max_new_tokens:
        reason = "stop"  # vLLM ≥ 0.10.2 before PR #27555 calls an end of sequence at the last allowed token "length"
    if is_stop[:-1].any() or bool(is_stop[-1]) != (reason == "stop"):
        raise VllmOutputError(f"a sample finished with {reason!r} but its stop ids {sorted(stop_ids)} are "
                              "elsewhere than exactly at its end")
    # A log-softmax is ≤ 0; float rounding may leave +1e-7 on a near-certain token, which the wire refuses.
    return GeneratedCompletion(token_ids, np.minimum(values, 0.0).astype(np.float32), reason)


def cut_at_stop(completion: GeneratedCompletion, stop: StopStrings) -> GeneratedCompletion:
    """``completion`` ended at the token that completes its first stop string (``stops.py``), as the transformers
    backend ends it while it samples; unchanged when it completes none."""
    length = stop.cut(completion.token_ids)
    if length is None:
        return completion
    return GeneratedCompletion(completion.token_ids[:length].copy(), completion.sampler_logprobs[:length].copy(),
                               "stop")


def request_seeds(seed: int | None, num_prompts: int, num_completions: int) -> list[int | None]:
    """Each request's seed: b + i·G for prompt i, b drawn from ``seed`` (None: vLLM draws fresh ones)."""
    if seed is None:
        return [None] * num_prompts
    base = int(np.random.SeedSequence(abs(int(seed))).generate_state(1, dtype=np.uint32)[0])
    return [base + i * num_completions for i in range(num_prompts)]
