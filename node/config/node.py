"""``NodeConfig``, every section together, the sections of the run around the step (``[mix]``, ``[eval]``,
``[loop]``, ``[metrics]``, ``[checkpoint]``), and ``load_config``."""

from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from ftis.node.config.base import (
    MAX_COUNT,
    MAX_SECONDS,
    MAX_SEED,
    ConfigError,
    Section,
    describe_validation_error,
    read_toml,
)
from ftis.node.config.generation import GenerationConfig
from ftis.node.config.policy import ModelConfig, TaskConfig
from ftis.node.config.swarm import SwarmConfig
from ftis.node.config.training import LossConfig, TrainerConfig
from ftis.protocol.limits import MAX_COMPLETION_TOKENS


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
    at_start: bool = Field(
        True, description="Also evaluate before the first round (the model as it starts); false where that figure is "
        "known already (the demo's solo runs start from their swarm twin's model)."
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
