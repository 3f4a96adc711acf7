"""``[loss]`` as the loss takes it: plain parameters, the divergence threshold g at the step's value of its schedule.

The loss reads no config object (``loss/__init__.py``); the trainer builds its ``LossParams`` here once per step.
"""

from ftis.node.config import LossConfig
from ftis.node.loss import LossParams


def loss_params(loss: LossConfig, step: int = 0) -> LossParams:
    """The loss's plain parameters at optimizer step ``step``."""
    return LossParams(
        clip_c=loss.clip_c,
        epsilon=loss.epsilon,
        divergence_threshold=loss.divergence_threshold_at(step),
        filter_rule=loss.filter_rule,
        advantage_norm=loss.advantage_norm,
        max_surprise=loss.max_surprise,
        surprise_window=loss.surprise_window,
    )
