"""The node's typed config tree: pydantic models with ``extra="forbid"``, each setting documented once.

- ``__init__.py``   ``NodeConfig`` and its sections; ``load_config(path)`` reads and validates a TOML file.
- ``arithmetic.py`` ``[task.arithmetic]``, and the warm-up's override of it.
- ``swarm.py``      ``[swarm]``: joining the swarm, the exchange, peer scores.
- ``base.py``       the mechanism the demo's file (``demo/settings.py``) and the experiment's grid
                    (``experiment/grid.py``) share: ``Section`` (the base of every section), ``merged`` (a partial
                    table laid over another), ``read_toml`` and ``describe_validation_error`` (every problem as
                    ``loc.path: reason``).

``examples/*.toml`` are parsed by the test suite, so they cannot rot. This package imports nothing of the node
outside itself, only ``ftis.protocol`` (its limits, ``UserError``; docs/development.md, "Layers"): each package turns
its section into the plain settings it takes (``swarm.inbox.inbox_limits``, ``trainer.loss_params.loss_params``, ...).
"""

import math
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ftis.node.config.arithmetic import (
    ARITHMETIC_OPERATIONS,
    MAX_ARITHMETIC_DIGITS,
    MAX_ARITHMETIC_OPERANDS,
    ArithmeticConfig,
    ArithmeticOverride,
)
from ftis.node.config.base import (
    MAX_BYTES,
    MAX_CONCURRENT_STREAMS,
    MAX_COUNT,
    MAX_GRADIENT_NORM,
    MAX_LEARNING_RATE,
    MAX_LORA_RANK,
    MAX_SECONDS,
    MAX_SEED,
    MAX_THREADS,
    ConfigError,
    Section,
    describe_validation_error,
    merged,
    partial_of,
    read_toml,
    validated,
    validation_problems,
)
from ftis.node.config.swarm import RUN_ID_PATTERN, SwarmConfig
from ftis.protocol.limits import (
    MAX_BATCH_TOKENS,
    MAX_COMPLETION_TOKENS,
    MAX_GROUPS,
    MAX_PROMPT_TOKENS,
    MAX_TEMPERATURE,
    MAX_VOCAB_SIZE,
    MIN_TEMPERATURE,
)

__all__ = [
    "ARITHMETIC_OPERATIONS",
    "MAX_ARITHMETIC_DIGITS",
    "MAX_ARITHMETIC_OPERANDS",
    "MAX_BYTES",
    "MAX_CONCURRENT_STREAMS",
    "MAX_COUNT",
    "MAX_GRADIENT_NORM",
    "MAX_LEARNING_RATE",
    "MAX_LORA_RANK",
    "MAX_SECONDS",
    "MAX_SEED",
    "MAX_THREADS",
    "RUN_ID_PATTERN",
    "ArithmeticConfig",
    "ArithmeticOverride",
    "CheckpointConfig",
    "ConfigError",
    "EvalConfig",
    "GenerationConfig",
    "LoopConfig",
    "LossConfig",
    "LossVariant",
    "MetricsConfig",
    "MixConfig",
    "ModelConfig",
    "NodeConfig",
    "Section",
    "SwarmConfig",
    "TaskConfig",
    "TrainerConfig",
    "VllmConfig",
    "WarmupConfig",
    "describe_validation_error",
    "load_config",
    "merged",
    "partial_of",
    "read_toml",
    "validated",
    "validation_problems",
]

MAX_STOP_CHARACTERS = 64  # a stop string's length: the generator decodes that many tokens' text at each step
LossVariant = Literal["nois", "vis", "tis", "ftis", "fvis"]  # the names of LOSS_VARIANTS (a test checks)


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


class ModelConfig(Section):
    """The policy this node trains (docs/node.md): any size, full fine-tuning or LoRA."""

    name: str = Field("tiny-small", description="A built-in tiny model, a local folder, or a hub id.")
    adapter: Literal["full", "lora"] = Field("full", description="Train every weight, or a LoRA adapter.")
    lora_rank: int = Field(128, ge=1, le=MAX_LORA_RANK,
                           description="LoRA rank r (the paper's 128; clamped for tiny models).")
    lora_alpha: float = Field(256.0, gt=0, le=MAX_LORA_RANK * 16, description="LoRA alpha (the paper's 256).")
    lora_target_modules: list[str] | None = Field(
        None, description="Modules LoRA adapts; default: the attention and MLP projections present."
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Weights' dtype.")
    device: str = Field("cpu", description="torch device, e.g. cpu or cuda.")
    seed: int = Field(0, ge=0, le=MAX_SEED,
                      description="Seeds tiny models' weights, LoRA's init, sampling and problem order.")
    revision: str | None = Field(None, description="Hub revision of the weights.")
    chat_template: Literal["auto", "on", "off"] = Field(
        "auto", description="Wrap prompts in the tokenizer's chat template: auto (when it has one), on, off."
    )
    bos: Literal["auto", "on", "off"] = Field(
        "auto", description="Begin prompts with the tokenizer's begin-of-sequence token: auto (where the tokenizer "
        "adds it to a text itself, as Gemma's does), on, off (a chat template that writes one keeps it)."
    )
    warmup: WarmupConfig = Field(default_factory=WarmupConfig, description="Supervised warm start (tiny models).")


class TaskConfig(Section):
    """What the node trains on and how it scores completions (its own and its peers')."""

    name: Literal["gsm8k", "math500", "arithmetic"] = Field("arithmetic", description="The task.")
    split: str = Field("train", description="The split prompts are drawn from.")
    data_files: dict[str, str] = Field(
        default_factory=dict, description="Local JSONL file per split (GSM8K, MATH-500); default: the hub."
    )
    arithmetic: ArithmeticConfig = Field(
        default_factory=ArithmeticConfig, description="The synthetic arithmetic task's settings."
    )
    trust_peer_answers: bool = Field(
        False, description="Score a peer's group against its own gold answer when this node lacks the problem."
    )
    check_steps: bool = Field(
        True, description="Training rewards, this node's samples and its peers': a right answer reached through a "
        "false equation written on the way (\"2+2=5\") scores 0, and a peer's such completions count against it "
        "(tasks/steps.py). Evaluations score answers alone."
    )
    few_shot: int = Field(
        0, ge=0, le=16,
        description="Solved examples before each question (0: none), from the task's dev (arithmetic) or train "
        "split: earlier turns in the chat template, else the plain layout. Peers of one tokenizer must agree on it."
    )


class VllmConfig(Section):
    """The vLLM generation backend (``generation.backend = "vllm"``: the ``[vllm]`` extra, a GPU). The engine runs
    in the node's process on the trainer's GPU and takes the trainer's weights after every optimizer step."""

    gpu_memory_utilization: float = Field(
        0.3, gt=0, lt=1, description="Fraction of the GPU's total memory vLLM takes (its weights and KV cache); the "
        "trainer, loaded first, uses the rest."
    )
    dtype: Literal["bfloat16", "float16", "float32"] = Field(
        "bfloat16", description="The engine's weights' dtype (the trainer's is model.dtype)."
    )
    max_model_len: int | None = Field(
        None, ge=1, le=MAX_PROMPT_TOKENS + MAX_COMPLETION_TOKENS,
        description="Longest prompt + completion the engine serves; unset: the model's own maximum."
    )
    enforce_eager: bool = Field(False, description="No CUDA graphs: faster start-up, slower decoding.")
    max_num_batched_tokens: int | None = Field(
        None, ge=1, le=MAX_BATCH_TOKENS,
        description="Tokens the engine schedules per step (a longer prefill is split); unset: vLLM's "
        "default. vLLM's CPU build cannot split a seeded request's prefill: there, set it to at least "
        "prompts_per_round × group_size × the longest prompt's tokens."
    )
    enable_prefix_caching: bool = Field(
        True, description="Reuse a prompt's KV cache across its G completions (emptied at every weight sync)."
    )
    scratch_dir: Path | None = Field(
        None, description="Where the engine's starting export and each version's LoRA adapter are written; unset: "
        "a temporary folder, removed at exit."
    )


class GenerationConfig(Section):
    """Sampling this node's own groups."""

    backend: Literal["transformers", "vllm"] = Field(
        "transformers", description='"transformers": the built-in sampling loop (CPU or GPU); "vllm": a vLLM engine '
        "beside the trainer on its GPU, synced to the trainer's weights after every step ([generation.vllm])."
    )

    prompts_per_round: int = Field(8, ge=1, le=MAX_GROUPS, description="Prompts (groups) generated per round.")
    group_size: int = Field(
        8, ge=1, le=512, description="G: completions per prompt (horizontal grouping: this node's share, G/k)."
    )
    temperature: float = Field(1.0, ge=MIN_TEMPERATURE, le=MAX_TEMPERATURE,
                               description="Sampling temperature (the paper: 1); the protocol carries 0.1 to 10.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling; 1 = off (the paper). The trained policy "
                         "is the whole distribution at the temperature: below 1, even this node's own samples are "
                         "off-policy (IS weights below 1).")
    top_k: int = Field(0, ge=0, le=MAX_VOCAB_SIZE,
                       description="Top-k sampling; 0 = off. As top_p: on, it makes own samples off-policy.")
    max_new_tokens: int = Field(256, ge=1, le=MAX_COMPLETION_TOKENS, description="Completion length cap.")
    stop: list[str] = Field(
        default_factory=list, max_length=8, description="Strings that end a completion besides the end-of-sequence "
        'tokens (kept in it), e.g. ["</answer>"] for a base model that never writes its end token.'
    )
    batch_size: int = Field(
        64, ge=1, le=MAX_COUNT,
        description="Sequences per generation forward pass (transformers; vLLM batches by itself)."
    )
    vllm: VllmConfig = Field(default_factory=VllmConfig, description="The vLLM backend's settings.")

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, value: list[str]) -> list[str]:
        for text in value:
            if not 0 < len(text) <= MAX_STOP_CHARACTERS:
                raise PydanticCustomError("stop", "each stop string has 1 to {limit} characters, not {n}",
                                          {"limit": MAX_STOP_CHARACTERS, "n": len(text)})
        return value


class MixConfig(Section):
    """Which received groups a step trains on, beside the node's own."""

    max_peer_groups: int = Field(32, ge=0, le=MAX_COUNT,

                                 description="At most this many peer groups per step, fair across peers (0: only its "
                                 "own).")
    max_peer_share: float = Field(0.5, gt=0, le=1, description="At most this share of max_peer_groups (rounded up) "
                                  "from one peer, however few others sent groups: one identity never makes up "
                                  "most of a step's peer groups.")
    max_scoring_s: float = Field(
        10.0, gt=0, le=MAX_SECONDS,
        description="The most seconds a step spends scoring its peers' groups (rewards, texts rebuilt in this node's "
        "tokens): the groups left once it is spent are not scored this step, so a task whose check is slow "
        "(MATH-500's math_verify, up to 5 s a completion) never makes a round wait on its peers. What a step takes "
        "from peers is bounded from the settings as well: docs/swarm.md, \"Hostile peers\".")


class EvalConfig(Section):
    """Periodic greedy evaluation on a held-out split while training (also ``ftis-node eval --config``'s
    defaults). Results go into ``metrics.jsonl`` as records with ``eval_accuracy``."""

    every: int = Field(
        0, ge=0, le=MAX_COUNT, description="Evaluate at the start of a run and after every N-th round; 0 = never."
    )
    split: str | None = Field(
        None, description='The split evaluated; unset: "test" (the held-out split of every built-in task).'
    )
    limit: int | None = Field(
        200, ge=1, le=MAX_COUNT, description="Problems per evaluation: the first N of the split (a fixed set of N for "
        "arithmetic); unset: the whole split (500 for arithmetic)."
    )
    max_new_tokens: int | None = Field(None, ge=1, le=MAX_COMPLETION_TOKENS,
                                       description="Completion length cap; unset: generation's.")
    batch_size: int | None = Field(None, ge=1, le=MAX_COUNT,
                                   description="Sequences per forward pass; unset: generation's.")


class LoopConfig(Section):
    """How rounds follow each other (docs/node.md)."""

    mode: Literal["async", "rounds"] = Field(
        "async",
        description='"async": train on whatever peers\' groups have arrived, never wait (default); "rounds": '
        "wait up to round_deadline_s for each live peer's batch of the current round.",
    )
    round_deadline_s: float = Field(
        30.0, gt=0, le=MAX_SECONDS, description="rounds mode: the longest a round waits for its peers' batches."
    )
    min_peers: int = Field(
        0, ge=0, le=MAX_COUNT,
        description="rounds mode: a round also waits (up to the deadline) until this many peers are live (0: none)."
    )
    rounds_ahead: int = Field(
        4, ge=1, le=MAX_COUNT,
        description="rounds mode: a peer's batch up to this many rounds ahead of this node's is fetched and held "
        "(charged to the peer's quota and the buffer) until this node reaches its round; one further ahead is not "
        "fetched. A running node jumps further than this only to a round two live peers have reached (else this "
        "far: it catches up, or is moved by one peer, this many rounds a round at most).",
    )
    grouping: Literal["vertical", "horizontal"] = Field(
        "vertical",
        description='"vertical": a group is one node\'s generation.group_size completions for its own prompt '
        '(default; the paper found it better); "horizontal": every node samples its share G/k '
        "(generation.group_size) for each of the round's shared prompts, and the advantage is over all nodes' "
        'completions for a prompt. Needs mode = "rounds", and one task, split and swarm_seed on every node.',
    )
    swarm_seed: int = Field(
        0, ge=0, le=MAX_SEED,
        description="horizontal grouping: seeds each round's shared prompts; every node of a run must "
        "use the same value."
    )

    @model_validator(mode="after")
    def _horizontal_needs_rounds(self) -> "LoopConfig":
        if self.grouping == "horizontal" and self.mode != "rounds":
            raise ValueError('grouping = "horizontal" needs mode = "rounds": the nodes share each round\'s prompts')
        return self


class MetricsConfig(Section):
    """What a node writes and shows each step (``metrics.jsonl`` is always written in its folder)."""

    display: Literal["auto", "table", "lines"] = Field(
        "auto",
        description='"table": a live table of the last steps; "lines": one summary line per step; "auto": the '
        "table when standard output is a terminal, lines otherwise (logs, pipes).",
    )
    table_rows: int = Field(8, ge=1, le=100, description="Steps the live table shows.")
    tensorboard: bool = Field(True, description="Also write TensorBoard event files in the node folder's tensorboard/.")


class CheckpointConfig(Section):
    """Checkpoints in the node folder's ``checkpoints/`` (what ``--resume`` continues from) and the Hugging
    Face export in its ``export/``. A checkpoint is also written, and the model exported, when the node stops."""

    every_rounds: int = Field(
        50, ge=0, le=MAX_COUNT,
        description="Write a checkpoint after every N rounds (one optimizer step each); 0 = only when "
        "the node stops."
    )
    keep_last: int = Field(3, ge=1, le=MAX_COUNT,
                           description="Checkpoints kept; older ones are deleted once a newer one is written.")
    export_on_checkpoint: bool = Field(
        True, description="Also export the model in Hugging Face format to export/ at every checkpoint."
    )


class NodeConfig(Section):
    """Everything a node is configured with."""

    loss: LossConfig = Field(default_factory=LossConfig, description="The training loss.")
    swarm: SwarmConfig = Field(default_factory=SwarmConfig, description="The swarm and the exchange.")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="The optimizer step.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="The policy.")
    task: TaskConfig = Field(default_factory=TaskConfig, description="The task and its rewards.")
    generation: GenerationConfig = Field(default_factory=GenerationConfig, description="Sampling.")
    mix: MixConfig = Field(default_factory=MixConfig, description="Peers' groups per step.")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="Periodic evaluation.")
    loop: LoopConfig = Field(default_factory=LoopConfig, description="Waiting for peers, or not.")
    metrics: MetricsConfig = Field(default_factory=MetricsConfig, description="Metrics outputs.")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description="Checkpoints and export.")

    @model_validator(mode="after")
    def _warmup_is_for_tiny_arithmetic(self) -> "NodeConfig":
        if self.model.warmup.steps and not (self.model.name.startswith("tiny-") and self.task.name == "arithmetic"):
            raise ValueError("model.warmup needs a built-in tiny model (tiny-*) and the arithmetic task; "
                             f"got {self.model.name!r} on {self.task.name!r}")
        return self

    @model_validator(mode="after")
    def _warmup_mix_is_valid(self) -> "NodeConfig":
        """Each key of the warm-up's mix is checked where it is written; the cross-field checks need the task's."""
        try:
            self.task.arithmetic.overridden(self.model.warmup.arithmetic)
        except ValidationError as error:
            where = "model.warmup.arithmetic over task.arithmetic"
            raise PydanticCustomError("warmup_mix", "{problems}",
                                      {"problems": describe_validation_error(error, where)}) from None
        return self


def load_config(path: str | Path) -> NodeConfig:
    """Read and validate a TOML config file; ``ConfigError`` says what is wrong and where."""
    path = Path(path)
    data = read_toml(path)
    try:
        return NodeConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{path}: {describe_validation_error(error)}") from None
