"""What the loss tests share: the grid of settings every variant is checked under, the layout of their batches (a
hand-made one and random ones), and a gradient that is zero where nothing depends on the log-probs."""

import torch

from ftis.node.loss import LossParams

PARAMS = {
    f"{rule}-{norm}": LossParams(clip_c=2.0, epsilon=0.2, divergence_threshold=1.0, filter_rule=rule,
                                 advantage_norm=norm)
    for rule in ("or", "and")
    for norm in ("std", "mean_only")
}


# The hand-made batch: 10 completions of at most 4 tokens in four groups, two informative (ids 0 and 7), one with
# equal rewards (3), one of a single completion (5); row 5 has no tokens; rows 0 and 6 are the node's own.
HAND_LAYOUT = {
    "lengths": [4, 2, 3, 2, 3, 0, 4, 2, 1, 3],
    "rewards": [1.0, 0.0, 0.5, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.5],
    "group_ids": [0, 0, 0, 0, 7, 7, 7, 3, 3, 5],
    "off_policy": [False, True, True, True, True, True, False, True, True, True],
}


def hand_old() -> torch.Tensor:
    """(10, 4) float64 log π_θold of the hand-made batch."""
    return -1.0 - 0.25 * torch.arange(40, dtype=torch.float64).reshape(10, 4) % 3


def random_layout(generator: torch.Generator, groups: int, group_size: int, T: int, min_length: int) -> dict:
    """A random batch's lengths (``min_length``…T), dyadic rewards (group means stay exact, so Â = 0 is exactly 0
    in both computations), group ids and off-policy flags, drawn from ``generator`` in that order."""
    B = groups * group_size
    choices = torch.tensor([0.0, 0.25, 0.5, 1.0])
    return {
        "lengths": torch.randint(min_length, T + 1, (B,), generator=generator).tolist(),
        "rewards": choices[torch.randint(0, 4, (B,), generator=generator)].tolist(),
        "group_ids": torch.arange(groups).repeat_interleave(group_size).mul(11).tolist(),
        "off_policy": (torch.rand(B, generator=generator) < 0.6).tolist(),
    }


def batch_cases(hand, random) -> dict:
    """The batches every variant is checked on: ``hand()`` and ``random(seed, groups, group_size, T)`` at three
    seeds and two shapes."""
    return {"hand": hand, "random0": lambda: random(0, 3, 4, 6), "random1": lambda: random(1, 3, 4, 6),
            "random2": lambda: random(2, 4, 3, 5)}


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
        assert float(getattr(out.figures, name)) == pytest.approx(value, rel=1e-5, abs=1e-6), name
