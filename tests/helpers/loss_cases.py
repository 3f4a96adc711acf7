"""What the loss tests share: the grid of settings every variant is checked under, and a gradient that is zero
where nothing depends on the log-probs."""

import torch

from ftis.node.loss import LossParams

PARAMS = {
    f"{rule}-{norm}": LossParams(clip_c=2.0, epsilon=0.2, divergence_threshold=1.0, filter_rule=rule,
                                 advantage_norm=norm)
    for rule in ("or", "and")
    for norm in ("std", "mean_only")
}


def gradient(loss: torch.Tensor, logprobs: torch.Tensor) -> torch.Tensor:
    """d loss / d logprobs; zeros when every completion was clipped or dropped (nothing depends on them)."""
    if not loss.requires_grad:
        return torch.zeros_like(logprobs)
    (grad,) = torch.autograd.grad(loss, logprobs, allow_unused=True)
    return torch.zeros_like(logprobs) if grad is None else grad
