"""The distribution a sampler draws a token from, and the draw: ``processed_logprobs`` (logits / T, then top-k, then
top-p, renormalised) is π_gen, whose log-prob of the drawn token is what the wire records; ``sampling_pick`` draws
from it and returns that log-prob without materialising the log-softmax; ``greedy_pick`` is argmax (evaluation).
The transformers backend's loop (``hf.py``) calls them; vLLM's engine matches them (``vllm_engine.py``)."""

from collections.abc import Callable

import torch
from torch import Tensor

from ftis.protocol import SamplingSettings

# pick(logits (B, V) float32) -> (token ids (B,) int64, their log-probs under the drawing distribution (B,))
Pick = Callable[[Tensor], tuple[Tensor, Tensor]]


def processed_logprobs(logits: Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """log π_gen(· | context) over the vocabulary for logits (..., V): the distribution the sampler draws
    from. Logits / T, then keep the top-k (ties with the k-th kept; 0 = off), then the smallest set of
    most likely tokens whose mass reaches top_p (the most likely token always stays), then
    log-softmax: masked tokens get -inf, the rest renormalise. The order is transformers' and vLLM's.

    Computed in float32 whatever the model's dtype: a bf16 log-softmax would cost ~1e-2 of precision.
    """
    return processed_scores(logits, temperature, top_k, top_p).log_softmax(dim=-1)


def processed_scores(logits: Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """``processed_logprobs`` before its log-softmax: logits / T in float32, masked tokens at -inf. A new tensor
    (the logits are never written to)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    scores = logits.float() / temperature if temperature != 1.0 else logits.float().clone()  # (..., V)
    vocab_size = scores.shape[-1]
    if 0 < top_k < vocab_size:
        kth_largest = torch.topk(scores, top_k, dim=-1).values[..., -1:]  # (..., 1)
        scores = scores.masked_fill(scores < kth_largest, float("-inf"))
    if top_p < 1.0:
        sorted_scores, order = scores.sort(dim=-1, descending=True)
        probs = sorted_scores.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs  # mass of the tokens more likely than this one
        drop_sorted = mass_before >= top_p  # the first token has 0 before it, and top_p > 0: always kept
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        scores = scores.masked_fill(drop, float("-inf"))
    return scores


def sampling_pick(sampling: SamplingSettings, generator: torch.Generator) -> Pick:
    """Draw from ``processed_logprobs`` and return the drawn tokens' log-probs under it.

    One pass makes the weights exp(score − max) in place of the scores (masked tokens weigh 0); the token is
    drawn from them in two steps (``_draw``), and its log-prob is its score − max − log Σ weights: the
    log-softmax at that one token, never materialised over the vocabulary."""

    def pick(logits: Tensor) -> tuple[Tensor, Tensor]:
        scores = processed_scores(logits, sampling.temperature, sampling.top_k, sampling.top_p)  # (B, V)
        top = scores.max(dim=-1, keepdim=True).values  # (B, 1)
        weights = scores.sub_(top).exp_()  # (B, V) in place: the scores are not needed again
        tokens = _draw(weights, generator)  # (B,)
        chosen = weights.gather(-1, tokens[:, None]).squeeze(-1)  # exp(score − max) of each drawn token
        return tokens, chosen.log() - weights.sum(dim=-1).log()

    return pick


DRAW_BLOCK = 1024  # _draw's block of the vocabulary


def _draw(weights: Tensor, generator: torch.Generator) -> Tensor:
    """(B,) one index per row of ``weights`` (B, V) ≥ 0, drawn with probability weight / row sum: a block of
    ``DRAW_BLOCK`` entries by the blocks' sums, then an entry of that block by its weights. The product of the
    two is the entry's share of the row, exactly. ``torch.multinomial`` over the whole row draws an exponential
    variate for each of its V entries (on a CPU, most of a decode step's sampling time at 262,144 words);
    here two draws cover V / DRAW_BLOCK + DRAW_BLOCK entries."""
    rows, vocab = weights.shape
    if vocab <= DRAW_BLOCK:
        return torch.multinomial(weights, 1, generator=generator).squeeze(-1)
    whole = vocab // DRAW_BLOCK * DRAW_BLOCK
    sums = weights[:, :whole].view(rows, -1, DRAW_BLOCK).sum(dim=-1)  # (B, V // DRAW_BLOCK)
    if whole < vocab:
        sums = torch.cat([sums, weights[:, whole:].sum(dim=-1, keepdim=True)], dim=-1)
    start = torch.multinomial(sums, 1, generator=generator) * DRAW_BLOCK  # (B, 1) each row's block
    index = start + torch.arange(DRAW_BLOCK, device=weights.device)  # (B, DRAW_BLOCK)
    inside = index < vocab  # the last block may be short
    block = weights.gather(-1, index.clamp(max=vocab - 1)) * inside  # (B, DRAW_BLOCK)
    return (start + torch.multinomial(block, 1, generator=generator)).squeeze(-1)


def greedy_pick(logits: Tensor) -> tuple[Tensor, Tensor]:
    """Argmax (the first one on ties). Under the greedy "sampler" (a point mass) its log-prob is 0."""
    tokens = logits.argmax(dim=-1)
    return tokens, torch.zeros(tokens.shape, dtype=torch.float32, device=tokens.device)
