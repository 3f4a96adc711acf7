"""Per-token log-probs of completion tokens under a model, at a given sampling temperature."""

import torch
from torch import Tensor

from ftis.node.trainer.packing import PackedBatch


def completion_logprobs(model: torch.nn.Module, batch: PackedBatch) -> Tensor:
    """(B, T) log π(token_j | prompt, tokens_<j) with logits / temperature, like the sampler used;
    carries the gradient. Padded positions hold garbage: the loss masks them.

    Memory: the (B, L, V) logits are the one large tensor; the log-softmax is not materialised
    (the chosen logit minus the row's logsumexp).
    """
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits  # (B, L, V)
    logits = logits.float() / batch.temperature[:, None, None]
    index = batch.target_index  # (B, T)
    rows = torch.arange(logits.shape[0])[:, None]  # (B, 1)
    at_targets = logits[rows, index]  # (B, T, V)
    chosen = at_targets.gather(-1, batch.completion_ids[..., None]).squeeze(-1)  # (B, T)
    return chosen - torch.logsumexp(at_targets, dim=-1)
