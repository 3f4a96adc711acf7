"""``[loss]``, ``[trainer]`` and ``[model.warmup]``: the F-TIS loss and its variants, the optimizer step, and the
tiny models' supervised warm start."""

import math
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from ftis.node.config.arithmetic import ArithmeticOverride
from ftis.node.config.base import MAX_COUNT, MAX_GRADIENT_NORM, MAX_LEARNING_RATE, Section
from ftis.protocol.limits import MAX_BATCH_TOKENS

LossVariant = Literal["nois", "vis", "tis", "ftis", "fvis"]  # the names of LOSS_VARIANTS (a test checks)
# The settings only some variants read: the truncation C (the truncated ones) and the filter's (the filtered ones).
# A value other than its default given to a variant that ignores it is refused: it would do nothing, silently.
# (A test checks this table against what each variant's loss does.)
VARIANT_SETTINGS: dict[str, tuple[str, ...]] = {
    "clip_c": ("tis", "ftis"),
    "divergence_threshold": ("ftis", "fvis"),
    "divergence_threshold_end": ("ftis", "fvis"),
    "divergence_schedule_steps": ("ftis", "fvis"),
    "filter_rule": ("ftis", "fvis"),
}


class LossConfig(Section):
    """The F-TIS loss and its ablation variants (docs/loss.md)."""

    variant: LossVariant = Field("ftis", description="Loss variant: nois, vis, tis, ftis (default) or fvis.")
    clip_c: float = Field(2.0, gt=0, allow_inf_nan=True,
                          description="C, the TIS truncation of the weight π_θold/π_gen; inf disables it.")
    epsilon: float = Field(0.2, gt=0, lt=1, description="ε, the PPO clip range [1-ε, 1+ε] of the ratio.")
    divergence_threshold: float = Field(
        10.0,
        ge=0,
        allow_inf_nan=True,
        description="g: an off-policy completion whose mean k3 divergence exceeds g is filtered (inf: none is). The "
        "paper found a small g helps a small model early and g≈50 a 3B model late.",
    )
    divergence_threshold_end: float | None = Field(
        None, ge=0, allow_inf_nan=True,
        description="If set, g moves linearly from divergence_threshold to this value (inf: filters none at the end)."
    )
    divergence_schedule_steps: int = Field(
        1000, ge=1, le=MAX_COUNT,
        description="Optimizer steps over which g reaches divergence_threshold_end, then stays."
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
    max_surprise: float = Field(
        5.0, gt=0, allow_inf_nan=True,
        description="A peer's completion in which some surprise_window tokens in a row surprise this node's own model "
        "by more than this on average (−log-prob, nats a token) is dropped and its peer charged, whatever log-probs "
        "it claims: text no answer needs (a payload phrase) is not learned from a stranger (inf: none is).",
    )
    surprise_window: int = Field(
        6, ge=1, le=MAX_COUNT,
        description="Tokens in a row whose mean max_surprise bounds; a shorter completion (a bare answer) is not "
        "judged."
    )
    same_tokenizer_weights: Literal["token", "sequence"] = Field(
        "token", description='Peers\' groups of this node\'s own tokenizer: "token" weighs each token (F-TIS as the '
        'paper has it); "sequence" one weight per completion, as groups of another tokenizer get (an ablation).'
    )

    @model_validator(mode="after")
    def _only_settings_the_variant_reads(self) -> "LossConfig":
        ignored = [name for name, variants in VARIANT_SETTINGS.items()
                   if self.variant not in variants and getattr(self, name) != type(self).model_fields[name].default]
        if ignored:
            uses = "; ".join(f"{name}: {', '.join(VARIANT_SETTINGS[name])}" for name in ignored)
            raise ValueError(f"variant {self.variant!r} does not read {', '.join(ignored)}, so the value given would "
                             f"do nothing; remove it, or choose a variant that reads it ({uses})")
        return self

    @field_validator("clip_c", "divergence_threshold", "divergence_threshold_end", "max_surprise")
    @classmethod
    def _not_nan(cls, value: float | None) -> float | None:
        if value is not None and math.isnan(value):
            raise ValueError("must be a number, not NaN")
        return value

    def divergence_threshold_at(self, step: int) -> float:
        """g at optimizer step ``step`` (constant unless divergence_threshold_end is set)."""
        if self.divergence_threshold_end is None:
            return self.divergence_threshold
        start, end = self.divergence_threshold, self.divergence_threshold_end
        progress = min(max(step, 0) / self.divergence_schedule_steps, 1.0)
        if progress == 0.0:
            return start
        if progress == 1.0:
            return end
        if math.isinf(start) or math.isinf(end):  # a line to or from infinity is infinite in between
            return math.inf
        return start + progress * (end - start)


class TrainerConfig(Section):
    """The optimizer step on each round's groups (docs/loss.md)."""

    learning_rate: float | None = Field(
        None, gt=0, le=MAX_LEARNING_RATE,
        description="AdamW learning rate; default 1e-6 for full fine-tuning, 1e-4 for LoRA (the paper's)."
    )
    weight_decay: float = Field(0.0, ge=0, le=1, description="AdamW weight decay (0: none).")
    max_grad_norm: float = Field(1.0, gt=0, le=MAX_GRADIENT_NORM,
                                 description="Gradients are clipped to this global norm.")
    max_tokens_per_microbatch: int = Field(
        1024, ge=1, le=MAX_BATCH_TOKENS,
        description="Tokens one forward pass computes, padding included: bounds the activations' memory "
        "(about 1.3 MiB a token for a 135M-270M model in float32). A group's prompt counts once; a micro-batch holds "
        "whole advantage groups where they fit; one larger than this is split into parts of its rows (its advantages "
        "computed over the whole first), so no pass is larger, whatever a peer's group holds."
    )
    autocast: Literal["off", "bfloat16"] = Field(
        "off", description="bfloat16: the step's matrix products in the decoder run in bfloat16 (torch.autocast), "
        "where a CPU with bfloat16 kernels or a GPU runs them 2-3x faster; the weights, their gradients, the "
        "optimizer's moments, the residual stream and the output layer's logits stay in float32 (docs/node.md)."
    )
    gradient_checkpointing: bool = Field(
        False, description="Recompute each layer's activations in the backward pass instead of keeping them: for a "
        "group whose activations do not fit (long completions). Each completion then computes its prompt again, and "
        "a step takes several times as long (docs/node.md)."
    )

    def lr_for(self, adapter: str) -> float:
        return self.learning_rate if self.learning_rate is not None else (1e-4 if adapter == "lora" else 1e-6)


class WarmupConfig(Section):
    """A supervised warm start of a built-in tiny model on arithmetic before training (``node/warmup/``), so its
    rewards start neither all 0 nor all 1. The warmed weights are cached on disk, keyed by the model's name and
    seed and every setting here but ``cache_dir``; a LoRA node warms its base model, then adds the adapter."""

    steps: int = Field(0, ge=0, le=MAX_COUNT,
                       description="Supervised optimizer steps (at most, with stop_accuracy); 0 = no warm "
                       "start (the default).")
    learning_rate: float = Field(2e-3, gt=0, le=MAX_LEARNING_RATE,
                                 description="AdamW learning rate: the cosine's peak, or the constant one.")
    batch_size: int = Field(64, ge=1, le=MAX_COUNT, description="Problems per step.")
    schedule: Literal["cosine", "constant"] = Field(
        "cosine", description="cosine: the learning rate decays to 0 over steps (a converged model); constant: it "
        "stays, for a warm-up that stop_accuracy ends early."
    )
    stop_accuracy: float | None = Field(
        None, gt=0, le=1, description="Stop at the first check whose greedy accuracy on the dev split reaches this, "
        "leaving a model GRPO can improve (docs/learning.md); unset: run every step."
    )
    check_every: int = Field(25, ge=1, le=MAX_COUNT, description="Steps between the dev checks of stop_accuracy.")
    no_carry_share: float = Field(
        0.0, ge=0, le=1, description="Share of the warm-up's addition problems redrawn until they need no carry: "
        "a specialist that has rarely seen a carry."
    )
    arithmetic: ArithmeticOverride = Field(  # type: ignore[valid-type]  # a TypedDict made at run time
        default_factory=dict, description="The warm-up's data mix: any of [task].arithmetic's settings, replacing the "
        'task\'s for the warm-up only, e.g. {operations = "+"} for a specialist.'
    )
    eval_problems: int = Field(
        200, ge=1, le=MAX_COUNT,
        description="Distinct held-out problems greedy accuracy is measured on (dev for the stop, test "
        "after)."
    )
    cache_dir: Path | None = Field(
        None, description="Where warmed models are kept; unset: $FTIS_CACHE/warmup, else ~/.cache/ftis-node/warmup."
    )
