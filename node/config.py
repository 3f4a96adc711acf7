"""The node's typed config tree: pydantic models with ``extra="forbid"``, each setting documented
once, here. Later parts of the node (swarm, trainer, generation) add their sections beside ``loss``.

Load a TOML file with ``load_config(path)``; ``examples/*.toml`` are parsed by the test suite, so
they cannot rot. This module imports no torch: ``LossConfig.params`` builds the loss's plain
``LossParams`` lazily.
"""

import math
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

if TYPE_CHECKING:
    from ftis.node.loss import LossParams

LossVariant = Literal["nois", "vis", "tis", "ftis", "fvis"]  # the names of LOSS_VARIANTS (a test checks)


class ConfigError(ValueError):
    """A config file that cannot be read or does not validate; the message lists every problem."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LossConfig(_Section):
    """The F-TIS loss and its ablation variants (DESIGN §2)."""

    variant: LossVariant = Field("ftis", description="Loss variant: nois, vis, tis, ftis (default) or fvis.")
    clip_c: float = Field(2.0, gt=0, description="C, the TIS truncation of the weight π_θold/π_gen; inf disables it.")
    epsilon: float = Field(0.2, gt=0, lt=1, description="ε, the PPO clip range [1-ε, 1+ε] of the ratio.")
    divergence_threshold: float = Field(
        10.0,
        ge=0,
        description="g: an off-policy completion whose mean k3 divergence exceeds g is filtered. The paper found "
        "a small g helps a small model early and g≈50 a 3B model late.",
    )
    divergence_threshold_end: float | None = Field(
        None, ge=0, description="If set, g moves linearly from divergence_threshold to this value."
    )
    divergence_schedule_steps: int = Field(
        1000, ge=1, description="Optimizer steps over which g reaches divergence_threshold_end, then stays."
    )
    filter_rule: Literal["or", "and"] = Field(
        "or", description='"or": drop if Â ≤ 0 or D > g (default); "and": drop if Â ≤ 0 and D > g (released code).'
    )
    filter_local: bool = Field(
        False, description="Also filter this node's own fresh (on-policy) completions."
    )
    advantage_norm: Literal["std", "mean_only"] = Field(
        "std", description='"std": (r - mean) / (std + 1e-6); "mean_only": r - mean (the released code).'
    )

    @field_validator("clip_c", "divergence_threshold", "divergence_threshold_end")
    @classmethod
    def _not_nan(cls, value: float | None) -> float | None:
        if value is not None and math.isnan(value):
            raise ValueError("must be a number, not NaN")
        return value

    @model_validator(mode="after")
    def _finite_epsilon(self) -> "LossConfig":
        if not math.isfinite(self.epsilon):
            raise ValueError("epsilon must be finite")
        return self

    def divergence_threshold_at(self, step: int) -> float:
        """g at optimizer step ``step`` (constant unless divergence_threshold_end is set)."""
        if self.divergence_threshold_end is None:
            return self.divergence_threshold
        progress = min(max(step, 0) / self.divergence_schedule_steps, 1.0)
        return self.divergence_threshold + progress * (self.divergence_threshold_end - self.divergence_threshold)

    def params(self, step: int = 0) -> "LossParams":
        """The loss's plain parameters at optimizer step ``step``."""
        from ftis.node.loss import LossParams

        return LossParams(
            clip_c=self.clip_c,
            epsilon=self.epsilon,
            divergence_threshold=self.divergence_threshold_at(step),
            filter_rule=self.filter_rule,
            advantage_norm=self.advantage_norm,
        )


class NodeConfig(_Section):
    """Everything a node is configured with."""

    loss: LossConfig = Field(default_factory=LossConfig, description="The training loss.")


def load_config(path: str | Path) -> NodeConfig:
    """Read and validate a TOML config file; ``ConfigError`` says what is wrong and where."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"{path}: cannot read ({error.strerror})") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML ({error})") from None
    try:
        return NodeConfig.model_validate(data)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in item['loc']) or '(root)'}: {item['msg']}" for item in error.errors()
        )
        raise ConfigError(f"{path}: {problems}") from None
