"""Per-token log-probs of completion tokens under a model, at a given sampling temperature."""

import torch
from torch import Tensor

from ftis.node.trainer.packing import PackedBatch


def completion_logprobs(model: torch.nn.Module, batch: PackedBatch) -> Tensor:
    """(B, T) log π_θ(token_j | prompt, tokens_<j) with logits / temperature (the sampler's), and no top-k or
    top-p: the policy trained is the whole distribution (``generation/hf.py`` says what that means for the
    IS weight when the sampler truncates it); carries the gradient. Padded positions hold garbage: the loss
    masks them.

    Memory: the (B, L, V) logits are the one large tensor; the log-softmax is not materialised
    (the chosen logit minus the row's logsumexp).

    Devices: the packed batch is on the CPU; the forward pass runs where the model is (a GPU node's), and
    the (B, T) result comes back to the CPU, where the loss runs beside the rest of the batch (the gradient
    follows the copy back to the model).
    """
    device = next(model.parameters()).device
    logits = model(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device)).logits
    logits = logits.float() / batch.temperature.to(device)[:, None, None]  # (B, L, V)
    index = batch.target_index.to(device)  # (B, T)
    rows = torch.arange(logits.shape[0], device=device)[:, None]  # (B, 1)
    at_targets = logits[rows, index]  # (B, T, V)
    chosen = at_targets.gather(-1, batch.completion_ids.to(device)[..., None]).squeeze(-1)  # (B, T)
    return (chosen - torch.logsumexp(at_targets, dim=-1)).cpu()
