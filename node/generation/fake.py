"""A fake generator for tests and demos that need no model: NumPy only, fast, deterministic.

    gen = FakeGenerator(vocab_size=64, eos_token_id=0, mean_length=16)
    groups = gen.generate([np.array([5, 6, 7])], num_completions=4, sampling=SamplingSettings(1.0, 1.0, 0, 32), seed=0)

What it produces: samples from a real, if trivial, policy, so its log-probs mean what a real
backend's do. The policy is context-free (a unigram): one fixed distribution over the vocabulary,
whatever the prompt and the tokens so far. Its logits are standard-normal draws from ``policy_seed``,
except the end-of-sequence token's, set so that at T = 1 a completion stops after ``mean_length``
tokens on average. Each request processes them like a real sampler (logits / T, top-k, top-p,
renormalised), draws every token from the result, and records each token's log-prob under it — exact
sampler log-probs: finite and ≤ 0. A completion stops at the first end-of-sequence token (kept,
"stop") or after ``max_new_tokens`` ("length").

Completion j of prompt i is drawn from its own stream seeded by (seed, i, j): the same seed gives the
same groups, and a group does not change when other prompts are added after it.
"""

import numpy as np

from ftis.node.generation.types import GeneratedCompletion, check_request
from ftis.protocol import SamplingSettings


def _processed_logprobs(logits: np.ndarray, sampling: SamplingSettings) -> np.ndarray:
    """(V,) float64: the NumPy twin of ``draws.processed_logprobs`` for one distribution."""
    scores = logits / sampling.temperature
    if 0 < sampling.top_k < scores.size:
        scores = np.where(scores < np.sort(scores)[-sampling.top_k], -np.inf, scores)
    if sampling.top_p < 1.0:
        order = np.argsort(-scores, kind="stable")
        probs = np.exp(scores[order] - scores[order[0]])
        probs /= probs.sum()
        mass_before = np.cumsum(probs) - probs
        scores = scores.copy()
        scores[order[mass_before >= sampling.top_p]] = -np.inf
    shifted = scores - scores.max()  # ≤ 0 exactly, so the log-probs below are ≤ 0
    return shifted - np.log(np.exp(shifted).sum())


class FakeGenerator:
    """The ``Generator`` of a fixed unigram policy (see the module docstring)."""

    def __init__(
        self,
        vocab_size: int = 64,
        eos_token_id: int = 0,
        mean_length: float = 16.0,
        policy_seed: int = 0,
        policy_version: int = 0,
    ):
        if not 0 <= eos_token_id < vocab_size:
            raise ValueError(f"eos_token_id {eos_token_id} is not below vocab_size {vocab_size}")
        if not mean_length > 1:
            raise ValueError(f"mean_length must be > 1, got {mean_length}")
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id
        self._policy_version = policy_version
        logits = np.random.default_rng(policy_seed).standard_normal(vocab_size)
        others = np.delete(logits, eos_token_id)
        log_mass_others = others.max() + np.log(np.exp(others - others.max()).sum())
        # p(eos) = e^l / (e^l + M) = 1 / mean_length  ⇔  l = log M − log(mean_length − 1)
        logits[eos_token_id] = log_mass_others - np.log(mean_length - 1)
        self.logits = logits  # (V,) float64, the policy

    @property
    def policy_version(self) -> int:
        return self._policy_version

    def sync_weights(self, policy_version: int) -> None:
        """Record the trainer's version; this policy is fixed, so nothing else changes."""
        self._policy_version = int(policy_version)

    def generate(
        self,
        prompts: list[np.ndarray],
        num_completions: int,
        sampling: SamplingSettings,
        seed: int | None = None,
    ) -> list[list[GeneratedCompletion]]:
        check_request(prompts, num_completions, sampling)
        logprobs = _processed_logprobs(self.logits, sampling)  # (V,)
        probs = np.exp(logprobs)
        probs /= probs.sum()  # exact normalisation for Generator.choice
        root = seed if seed is not None else int(np.random.SeedSequence().entropy)
        return [
            [self._complete(np.random.default_rng([root, i, j]), probs, logprobs, sampling.max_new_tokens)
             for j in range(num_completions)]
            for i in range(len(prompts))
        ]  # fmt: skip

    def _complete(
        self, rng: np.random.Generator, probs: np.ndarray, logprobs: np.ndarray, max_new_tokens: int
    ) -> GeneratedCompletion:
        draws = rng.choice(self.vocab_size, size=max_new_tokens, p=probs)  # (max_new_tokens,)
        ends = np.flatnonzero(draws == self.eos_token_id)
        n = int(ends[0]) + 1 if ends.size else max_new_tokens
        token_ids = draws[:n].astype(np.int64)
        return GeneratedCompletion(
            token_ids=token_ids,
            sampler_logprobs=logprobs[token_ids].astype(np.float32),
            finish_reason="stop" if ends.size else "length",
        )
