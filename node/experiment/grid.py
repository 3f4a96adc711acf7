"""The experiment's grid: which models, which conditions, how long, and every node's settings.

    grid = load_grid()                      # the packaged default, ``grid.toml`` beside this file
    grid = load_grid(Path("my-grid.toml"))  # a whole grid of your own (copy grid.toml and edit it)
    grid = grid.adjusted(quick=True, seeds=None, rounds=None)
    for cell in grid.cells(): ...           # (condition, seed), seed-major: seed 0 of every condition first
    config = grid.node_config("generalist", "ftis", seed=1, model_path=warm_folder)

A cell is one condition at one seed. A ``swarm`` condition trains its models together over one
in-memory swarm with its loss variant and grouping; a solo condition (``swarm = false``) trains each
model alone. A condition's models are all of ``[models]``, or the ones its ``models`` list names
(``grid.condition_models``). Pairing: at seed ``s`` the model at position ``i`` of ``[models]`` gets
model seed ``1000 s + i`` in every condition it is in (its problem order, sampling seeds and LoRA
initialisation), and every model starts from the same warm start in every cell (seeded by the model's
``warmup_seed``, else the grid's, as a paper's runs all start from one pretrained checkpoint), so a
condition and the reference differ only in what the condition changes.

A cell's *fingerprint* hashes everything that decides its result (the node settings, the condition's
models but a full model's unused LoRA settings, the condition, rounds, evaluation, the warm-up seed) but
not the number of seeds nor the other conditions: more seeds or another condition later reuse the cells
already done, while a cell of other settings is never mistaken for one of these. Settings left at a
default that did not always exist (a condition of every model, a model without its own warm-up seed) are
left out of the hash, so the cells of grids written before them stay valid.
"""

import hashlib
import json
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from ftis.node.config import (
    MAX_COUNT,
    MAX_LEARNING_RATE,
    MAX_SEED,
    LossVariant,
    ModelConfig,
    NodeConfig,
    Section,
    WarmupConfig,
    describe_validation_error,
    merged,
    read_toml,
)
from ftis.node.errors import USAGE, UserError

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,40}$"  # labels become file names and run ids
SEED_STRIDE = 1000  # model seed = SEED_STRIDE * cell seed + the model's position
# [model] settings each model's node gets from [models] and its seed (node_config); the rest of [node.model]
# (chat_template, bos, dtype, ...) is every node's.
EXPERIMENT_MODEL_KEYS = frozenset({"name", "adapter", "lora_rank", "lora_alpha", "seed", "warmup"})


class GridError(UserError, ValueError):
    """A grid file that cannot be read or does not describe a runnable grid; the message says why."""

    exit_code = USAGE


_NODE_MODEL = ModelConfig.model_fields


TINY_MODEL_NAMES = ("tiny-small", "tiny-medium", "tiny-large", "tiny-small-bpe")  # models/tiny.py's (a test checks)


class ModelSpec(Section):
    """One model of the swarm (and of the solo runs): a built-in tiny model, warm-started on arithmetic, or a
    pretrained model, which starts as it is. Its adapter settings are the node's ``[model]`` fields (same
    defaults, constraints and descriptions)."""

    name: str = Field(
        min_length=1, description="A built-in tiny model (``tiny-small-bpe``: tiny-small on the BPE tokenizer), "
        "warmed up first; or a pretrained one, as ``--model`` takes it (a real model's name, a folder, a .gguf "
        "file, a hub id), without a warm-up.")
    adapter: Literal["full", "lora"] = _NODE_MODEL["adapter"]
    lora_rank: int = _NODE_MODEL["lora_rank"]
    lora_alpha: float = _NODE_MODEL["lora_alpha"]
    learning_rate: float = Field(gt=0, le=MAX_LEARNING_RATE, description="AdamW learning rate of its GRPO steps.")
    warmup: WarmupConfig | None = Field(
        None, description="A tiny model's supervised warm start (required for one, refused for a pretrained "
        "model); ``arithmetic`` sets its data mix (a specialist's differs from the generalist's).")
    warmup_seed: int | None = Field(
        None, ge=0, le=MAX_SEED,
        description="Seeds its warm start (initial weights and training order) instead of the grid's "
        "``warmup_seed``: two models of one recipe become two independent models."
    )

    @model_validator(mode="after")
    def _warmed(self) -> "ModelSpec":
        if self.name in TINY_MODEL_NAMES:
            if self.warmup is None or self.warmup.steps < 1:
                raise ValueError(f"{self.name} needs a warmup of at least 1 step: a cold tiny model scores 0 and "
                                 "learns nothing")
        elif self.warmup is not None:
            raise ValueError(f"{self.name} is a pretrained model: it starts as it is, without a warmup")
        return self


class Condition(Section):
    """How the models train in one condition."""

    swarm: bool = Field(True, description="Train all models together over one swarm; false: each alone (on-policy).")
    variant: LossVariant = Field("ftis", description="The loss variant (nois, vis, tis, ftis, fvis).")
    grouping: Literal["vertical", "horizontal"] = Field(
        "vertical", description="Advantage groups: each node's own (vertical) or merged across nodes per shared "
        "prompt (horizontal; its node settings usually change group_size to G/k)."
    )
    node: dict[str, Any] = Field(
        default_factory=dict, description="Node settings laid over the grid's [node] for this condition only."
    )
    models: list[str] | None = Field(
        None, min_length=1, description="The labels of [models] that train in this condition (each keeps its "
        "model seed, from its place in [models]); unset: all of them."
    )

    @model_validator(mode="after")
    def _solo_is_vertical(self) -> "Condition":
        if not self.swarm and self.grouping == "horizontal":
            raise ValueError("horizontal grouping needs a swarm (swarm = true)")
        return self


class QuickSettings(Section):
    """What ``--quick`` replaces: a smoke test of every condition in about a minute."""

    seeds: int = Field(ge=1, le=MAX_COUNT, description="Seeds.")
    rounds: int = Field(ge=1, le=MAX_COUNT, description="Rounds per cell.")
    eval_every: int = Field(ge=1, le=MAX_COUNT, description="Rounds between evaluations.")
    eval_problems: int = Field(ge=1, le=MAX_COUNT, description="Problems per evaluation and split.")
    warmup_steps: int = Field(ge=1, le=MAX_COUNT, description="Every model's warm-up steps.")


class Grid(Section):
    """The whole experiment."""

    seeds: int = Field(ge=1, le=MAX_COUNT, description="Seeds per condition (cells are paired by seed).")
    rounds: int = Field(ge=1, le=MAX_COUNT, description="Rounds per cell: one optimizer step each, for every node.")
    eval_every: int = Field(ge=1, le=MAX_COUNT,
                            description="Greedy evaluation at round 0, every N rounds, and after the last.")
    eval_problems: int = Field(ge=1, le=MAX_COUNT, description="Problems per evaluation, in-distribution and OOD each.")
    id_split: str = Field("test", description="The in-distribution held-out split.")
    ood_split: str = Field("ood", description="The out-of-distribution split.")
    warmup_seed: int = Field(0, ge=0, le=MAX_SEED,
                             description="Seeds every model's warm start (one per model, shared by all cells).")
    reference: str = Field(description="The condition paired differences are taken against (a solo one).")
    comparisons: list[tuple[str, str]] = Field(
        default_factory=list, description="More pairs of conditions compared seed by seed, e.g. "
        '["ftis", "nois"]: the first minus the second, mean ± standard error and how many seeds came out ahead.'
    )
    node: dict[str, Any] = Field(default_factory=dict, description="Every node's settings (a partial node config).")
    models: dict[str, ModelSpec] = Field(min_length=1, description="The models, by label.")
    conditions: dict[str, Condition] = Field(min_length=1, description="The conditions, by name.")
    quick: QuickSettings = Field(description="The --quick grid.")

    @model_validator(mode="after")
    def _consistent(self) -> "Grid":
        for kind, names in (("model", self.models), ("condition", self.conditions)):
            for name in names:
                if not re.match(NAME_PATTERN, name):
                    raise ValueError(f"{kind} name {name!r} must match {NAME_PATTERN} (it names files)")
        for name, condition in self.conditions.items():
            chosen = condition.models or []
            unknown = [label for label in chosen if label not in self.models]
            if unknown:
                raise ValueError(f"conditions.{name}.models: no model {', '.join(map(repr, unknown))} in [models] "
                                 f"(it has {', '.join(self.models)})")
            if len(set(chosen)) != len(chosen):
                raise ValueError(f"conditions.{name}.models lists a model twice")
        for pair in self.comparisons:
            unknown = [name for name in pair if name not in self.conditions]
            if unknown:
                raise ValueError(f"comparisons: {', '.join(unknown)} is not a condition")
        reference = self.conditions.get(self.reference)
        if reference is None or reference.swarm:
            raise ValueError(f"reference {self.reference!r} must name a solo condition (swarm = false)")
        if "swarm" in self.node:
            raise ValueError("[node.swarm] is set by the experiment itself")
        taken = sorted(self.node.get("model", {}).keys() & EXPERIMENT_MODEL_KEYS)
        if taken:
            raise ValueError(f"[node.model] {', '.join(taken)}: set by the experiment itself, per model: use "
                             "[models] instead")
        return self

    def adjusted(self, *, quick: bool = False, seeds: int | None = None, rounds: int | None = None,
                 conditions: list[str] | None = None) -> "Grid":
        """This grid with ``--quick`` applied, then ``--seeds`` / ``--rounds`` (None: unchanged), and only
        ``conditions`` (None: all; the reference is always kept, and comparisons of dropped conditions go)."""
        data = self.model_dump()
        if conditions is not None:
            unknown = [name for name in conditions if name not in self.conditions]
            if unknown:
                raise GridError(f"--conditions: no condition {', '.join(unknown)} (the grid has "
                                f"{', '.join(self.conditions)})")
            kept = {*conditions, self.reference}
            data["conditions"] = {name: c for name, c in data["conditions"].items() if name in kept}
            data["comparisons"] = [pair for pair in data["comparisons"] if set(pair) <= kept]
        if quick:
            q = self.quick
            data.update(seeds=q.seeds, rounds=q.rounds, eval_every=q.eval_every, eval_problems=q.eval_problems)
            for spec in data["models"].values():
                if spec["warmup"] is not None:
                    spec["warmup"]["steps"] = q.warmup_steps
        data.update({key: value for key, value in (("seeds", seeds), ("rounds", rounds)) if value is not None})
        return _validate(data, "the adjusted grid")

    def cells(self) -> list["Cell"]:
        """Every (condition, seed), seed-major: an interrupted grid has whole seeds to compare."""
        return [Cell(condition, seed) for seed in range(self.seeds) for condition in self.conditions]

    def condition_models(self, condition: str) -> list[str]:
        """The labels of the models that train in ``condition``, in the order of ``[models]``."""
        chosen = self.conditions[condition].models
        return [label for label in self.models if chosen is None or label in chosen]

    def model_seed(self, label: str, seed: int) -> int:
        return SEED_STRIDE * seed + list(self.models).index(label)

    def warmup_seed_of(self, label: str) -> int:
        """The seed of model ``label``'s warm start: its own ``warmup_seed``, else the grid's."""
        own = self.models[label].warmup_seed
        return self.warmup_seed if own is None else own

    def node_config(self, label: str, condition: str, seed: int, model_path: Path) -> NodeConfig:
        """The config of model ``label``'s node in cell (``condition``, ``seed``), loading its warm start
        from ``model_path``. Raises ``GridError`` when the settings do not make a valid node config, or
        when the model does not train in that condition."""
        if label not in self.condition_models(condition):
            raise GridError(f"model {label!r} does not train in condition {condition!r}")
        spec, cond = self.models[label], self.conditions[condition]
        data = merged(self.node, cond.node)
        data = merged(data, {
            "model": {"name": str(model_path), "adapter": spec.adapter, "lora_rank": spec.lora_rank,
                      "lora_alpha": spec.lora_alpha, "seed": self.model_seed(label, seed)},
            "trainer": {"learning_rate": spec.learning_rate},
            "loss": {"variant": cond.variant},
            "loop": {"mode": "rounds", "grouping": cond.grouping, "swarm_seed": seed},
            "swarm": {"run_id": f"exp-{condition}-s{seed}"},
        })
        try:
            return NodeConfig.model_validate(data)
        except ValidationError as error:
            raise GridError(f"model {label!r} in condition {condition!r}: {describe_validation_error(error)}") from None

    def fingerprint(self, condition: str) -> str:
        """What decides a cell of ``condition`` (any seed), hashed; see the module docstring."""
        decisive = self.model_dump(mode="json", exclude={"seeds", "conditions", "quick", "reference", "comparisons"})
        for spec in decisive["models"].values():
            if spec["adapter"] != "lora":  # unused: a change of the node's LoRA defaults leaves these cells alone
                del spec["lora_rank"], spec["lora_alpha"]
            if spec["warmup_seed"] is None:  # the grid's, which is hashed already
                del spec["warmup_seed"]
            if spec["warmup"] is None:  # a pretrained model (tiny models always have one)
                del spec["warmup"]
        decisive["condition"] = self.conditions[condition].model_dump(mode="json", exclude={"models"})
        chosen = self.condition_models(condition)
        if chosen != list(self.models):  # a subset: its models, and their places (which set their seeds)
            decisive["models"] = {label: decisive["models"][label] for label in chosen}
            decisive["model_seeds"] = {label: self.model_seed(label, 0) for label in chosen}
        blob = json.dumps(decisive, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def check_node_configs(self) -> None:
        """Build every node config once (with a stand-in model path), so a bad setting fails before any run."""
        for condition in self.conditions:
            for label in self.condition_models(condition):
                self.node_config(label, condition, 0, Path("model"))


@dataclass(frozen=True)
class Cell:
    condition: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.condition}/seed-{self.seed}"


def default_grid_path() -> Path:
    return Path(str(resources.files("ftis.node.experiment") / "grid.toml"))


def load_grid(path: Path | None = None) -> Grid:
    """The grid in ``path`` (default: the packaged ``grid.toml``); ``GridError`` says what is wrong."""
    path = path or default_grid_path()
    data = read_toml(path, GridError)
    grid = _validate(data, str(path))
    grid.check_node_configs()
    return grid


def _validate(data: dict[str, Any], where: str) -> Grid:
    try:
        return Grid.model_validate(data)
    except ValidationError as error:
        raise GridError(f"{where}: {describe_validation_error(error)}") from None
