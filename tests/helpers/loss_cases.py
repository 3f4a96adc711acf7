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


def assert_matches(out, expected, logprobs: torch.Tensor) -> None:
    """The implementation's output ``out`` equals a naive loop's ``expected`` (loss, metrics: float64): loss and
    gradient with respect to ``logprobs`` to float32's precision, and every metric the loop computed."""
    import pytest

    assert out.loss.dtype == torch.float32 and out.loss.shape == ()
    torch.testing.assert_close(out.loss.double(), expected.loss.detach(), rtol=1e-5, atol=1e-6)
    grad = gradient(out.loss, logprobs)
    torch.testing.assert_close(grad, gradient(expected.loss, logprobs).float(), rtol=1e-5, atol=1e-6)
    assert torch.isfinite(grad).all()
    for name, value in expected.metrics.items():
        assert float(getattr(out.metrics, name)) == pytest.approx(value, rel=1e-5, abs=1e-6), name
