"""Sampler log-probs against a teacher-forced recompute of π_gen (logits / T, top-k, top-p: what the token
was drawn from): the check that a backend records its sampling distribution faithfully, which the vLLM
backend's tests lean on. The trainer computes π_θ (temperature only); the two agree when top-k and top-p
are off (tests/test_generation.py checks that too).

    assert recompute_gap(model, PROMPTS, groups, sampling) <= 1e-4
"""

import numpy as np
import torch

from ftis.node.generation.draws import processed_logprobs


def recompute_gap(model, prompts, groups, sampling) -> float:
    """Max |sampler log-prob − teacher-forced processed log-prob| over every token of ``groups`` (one group per
    prompt): each prompt + completion alone, no padding, no cache, in eval mode."""
    worst = 0.0
    model.eval()
    for prompt, group in zip(prompts, groups, strict=True):
        for c in group:
            ids = torch.as_tensor(np.concatenate([prompt, c.token_ids]))[None]
            with torch.no_grad():
                logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]  # (n, V)
            lp = processed_logprobs(logits, sampling.temperature, sampling.top_k, sampling.top_p)
            lp = lp.gather(-1, torch.as_tensor(c.token_ids)[:, None]).squeeze(-1)
            worst = max(worst, (lp - torch.as_tensor(c.sampler_logprobs)).abs().max().item())
    return worst
