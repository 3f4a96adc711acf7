"""The F-TIS algorithm core: pure functions over tensors (docs/loss.md).

Files:
- ``types.py``       ``LossInputs``, ``SequenceLossInputs``, ``LossParams``, ``LossFigures``, ``LossOutputs``:
                     what goes in and out.
- ``advantages.py``  vertical group advantages (std or mean-only) and zero-variance groups.
- ``terms.py``       the building blocks: masked means, the detached truncated IS weight, the k3
                     divergence per completion, the filter (rules "or" and "and"), the clipped surrogate, the figures.
- ``choices.py``     what makes each of ``nois``, ``vis``, ``tis``, ``ftis``, ``fvis`` (ratio, weight, filter),
                     written once and made at a granularity from its ``prepare`` and ``finish``.
- ``variants.py``    the per-token granularity, and the one table that names each variant's two forms.
- ``sequence.py``    the per-sequence granularity, for groups whose generator used another tokenizer: one
                     length-normalised, truncated weight per completion, and the filter on the same log-ratio.

Nothing here reads a config object, logs, calls ``.item()`` or does I/O: tensors and floats in,
a small dataclass out.
"""

from ftis.node.loss.advantages import GroupAdvantages, group_advantages
from ftis.node.loss.types import LossFigures, LossInputs, LossOutputs, LossParams, SequenceLossInputs
from ftis.node.loss.variants import LOSS_VARIANTS, LossVariant, compute_loss

__all__ = [
    "LOSS_VARIANTS",
    "GroupAdvantages",
    "LossFigures",
    "LossInputs",
    "LossOutputs",
    "LossParams",
    "LossVariant",
    "SequenceLossInputs",
    "compute_loss",
    "group_advantages",
]
