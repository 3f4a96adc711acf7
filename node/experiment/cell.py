"""One cell of the grid: a condition at a seed, run to the end, as a JSON-ready record.

    warm = prepare_warm_starts(grid, echo=print)  # once per grid: {label: warmed model folder}
    folder = warm_start_of(grid, "small")  # one model's, as the cells load it
    record = run_cell(grid, Cell("ftis", 0), warm)
    record = run_cell(grid, Cell("ftis", 0), warm, CellExtras(members=[make_attacker]))  # with additions

A swarm condition builds the node of each of its models (``grid.condition_models``) on one
``LockstepSwarm``; a solo condition builds each on a swarm of its own (they still run side by side, each
alone). Each round every node runs ``Node.run_round`` in its own thread (``lockstep.py``). Greedy
evaluations of every node on the in-distribution and OOD splits happen before round 0, after every
``eval_every`` rounds and after the last one, on the same fixed problems each time.

The record (``CELL_SCHEMA``): per node, the evaluation rounds and both accuracy curves, the
in-distribution accuracy per skill when the task names skills (``id_skills``: carry, no-carry), and per round
its own sampling reward and the step's figures: filtered fraction of all completions trained on and
of the peers' completions, and of all completions by the filter's two reasons (advantage ≤ 0, divergence
> g), mean IS weight over trained tokens, fraction of tokens truncated at C,
peer groups used, and whether a step was taken at all (a round whose groups all had equal rewards
takes none; its step figures are zeros, which the report leaves out). The fraction of peers'
completions filtered is ``filtered_fraction × sequences / (peer_groups × group_size)``: the filter
touches peers' completions only (``filter_local`` is off), and every node of a grid shares
``group_size``.

``CellExtras`` is how a caller adds to a cell what the grid does not describe, without another copy of
this loop: members of the swarm besides the nodes (an attacker publishing every round in lockstep), a
look at the nodes once built (to wrap a trainer and audit its steps), and each evaluation's per-problem
records. ``benchmarks/poisoning.py`` uses all three; the experiment itself none.
"""

import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ftis.node.config import ModelConfig, NodeConfig
from ftis.node.evaluation.evaluation import EvalResult
from ftis.node.experiment.grid import Cell, Grid
from ftis.node.experiment.lockstep import LockstepSwarm, SwarmMember, in_parallel, step_round
from ftis.node.records.round_report import RoundReport
from ftis.node.runner.node import Node

CELL_SCHEMA = 2  # bump when the record's layout changes
Echo = Callable[[str], None]


@dataclass(frozen=True)
class CellExtras:
    """What a caller adds to one cell beyond the grid (see the module docstring); the default adds nothing."""

    # Extra members of a swarm condition's lockstep, each made on the cell's swarm before round 0; every
    # round each runs beside the nodes and publishes one batch.
    members: Sequence[Callable[[LockstepSwarm], SwarmMember]] = ()
    built: Callable[[dict[str, Node]], None] | None = None  # the cell's nodes by label, once, before round 0
    # At each evaluation: a node's label, the rounds done, its in-distribution result with per-problem records.
    evaluated: Callable[[str, int, EvalResult], None] | None = None


def prepare_warm_starts(grid: Grid, echo: Echo | None = None) -> dict[str, Path]:
    """The warm start of every model some condition trains, trained now (all at once, a thread each) or
    found in the cache: {label: model folder}. Two models with one recipe share a folder (the cache's lock
    makes one wait). A pretrained model (no ``warmup``) starts as it is: its name."""
    used = {label for condition in grid.conditions for label in grid.condition_models(condition)}
    labels = [label for label in grid.models if label in used and grid.models[label].warmup is not None]
    starts = in_parallel([lambda label=label: warm_start_of(grid, label, echo) for label in labels])
    pretrained = {label: Path(grid.models[label].name) for label in grid.models
                  if label in used and grid.models[label].warmup is None}  # loaded as they are
    return {**dict(zip(labels, starts, strict=True)), **pretrained}


def warm_start_of(grid: Grid, label: str, echo: Echo | None = None) -> Path:
    """The warmed folder of model ``label`` (a model some condition trains), trained now or found in the cache:
    its recipe, its warm-up seed and the task of its first condition, as every cell of the grid loads it."""
    from ftis.node.warmup import warm_start, warmup_spec

    spec = grid.models[label]
    if spec.warmup is None:
        raise ValueError(f"model {label!r} ({spec.name}) is pretrained: it has no warm start")
    condition = next(name for name in grid.conditions if label in grid.condition_models(name))
    task = grid.node_config(label, condition, 0, Path("model")).task
    model = ModelConfig(name=spec.name, seed=grid.warmup_seed_of(label), warmup=spec.warmup)
    say = (lambda line: echo(f"{label}: {line}")) if echo else None
    return warm_start(warmup_spec(model, task), spec.warmup.cache_dir, say).path


def eval_rounds(rounds: int, every: int) -> list[int]:
    """The rounds completed at each evaluation: 0, every, 2·every, … and the last."""
    return sorted({*range(0, rounds, every), rounds})


def run_cell(grid: Grid, cell: Cell, warm: dict[str, Path], extras: CellExtras | None = None) -> dict[str, Any]:
    """Run ``cell`` to the end, with ``extras`` added, and return its record (nothing is written here)."""
    from ftis.node.runner.join import build_node

    extras = extras or CellExtras()
    started = time.perf_counter()
    condition = grid.conditions[cell.condition]
    if extras.members and not condition.swarm:
        raise ValueError(f"{cell.name}: extra swarm members need a swarm condition")
    configs = {label: grid.node_config(label, cell.condition, cell.seed, warm[label])
               for label in grid.condition_models(cell.condition)}
    first = next(iter(configs.values()))
    shared = LockstepSwarm(len(configs) + len(extras.members), first.swarm) if condition.swarm else None
    swarms: list[LockstepSwarm] = []
    nodes: dict[str, Node] = {}
    members: list[SwarmMember] = []
    try:
        for label, config in configs.items():
            swarm = shared or LockstepSwarm(1, config.swarm)
            swarms.append(swarm)
            nodes[label] = build_node(config, transport_factory=lambda fp, s=swarm, p=label: s.transport(p, fp))
        members += [make(shared) for make in extras.members]
        if extras.built is not None:
            extras.built(nodes)
        curves = {label: _Curves() for label in nodes}
        barriers = list({id(s): s.barrier for s in swarms}.values())
        due = eval_rounds(grid.rounds, grid.eval_every)
        records = extras.evaluated is not None  # keep each problem's record for the caller
        for done in range(grid.rounds + 1):
            if done in due:
                results = in_parallel([lambda n=n: _evaluate(grid, n, records) for n in nodes.values()])
                for (label, curve), (id_result, ood_result) in zip(curves.items(), results, strict=True):
                    curve.evaluated(done, id_result, ood_result.accuracy)
                    if extras.evaluated is not None:
                        extras.evaluated(label, done, id_result)
            if done < grid.rounds:
                reports = step_round(list(nodes.values()), barriers, members)
                for (label, curve), report in zip(curves.items(), reports, strict=True):
                    curve.stepped(report, configs[label])
    finally:
        for node in nodes.values():
            node.transport.close()
        for member in members:
            member.close()
    record = {
        "schema": CELL_SCHEMA,
        "condition": cell.condition,
        "seed": cell.seed,
        "fingerprint": grid.fingerprint(cell.condition),
        "settings": grid.conditions[cell.condition].model_dump(mode="json"),
        "rounds": grid.rounds,
        "wall_seconds": time.perf_counter() - started,
        "finished_at": time.time(),
        "nodes": {label: {"model": grid.models[label].name, "adapter": grid.models[label].adapter,
                          **curves[label].as_dict()} for label in nodes},
    }
    del nodes
    gc.collect()
    return record


def _evaluate(grid: Grid, node: Node, records: bool) -> tuple[EvalResult, EvalResult]:
    """Greedy evaluation of ``node`` on the in-distribution split (with per-problem ``records`` when asked)
    and on the OOD split."""
    from ftis.node.evaluation.evaluation import evaluate

    config = node.config
    settings = {"limit": grid.eval_problems, "prompter": node.prompter, "stop": node.stop,
                "batch_size": config.eval.batch_size or config.generation.batch_size,
                "max_new_tokens": config.eval.max_new_tokens or config.generation.max_new_tokens}
    return (evaluate(node.policy, node.task, grid.id_split, keep_records=records, **settings),
            evaluate(node.policy, node.task, grid.ood_split, **settings))


class _Curves:
    """One node's figures over a cell."""

    STEP_KEYS = ("own_reward", "filtered_fraction", "peer_filtered_fraction", "filtered_advantage_fraction",
                 "filtered_divergence_fraction", "filtered_implausible_fraction", "is_weight_mean",
                 "truncated_fraction", "peer_groups_used", "sequence_groups", "trained")

    def __init__(self) -> None:
        self.eval_rounds: list[int] = []
        self.id_accuracy: list[float] = []
        self.ood_accuracy: list[float] = []
        self.id_skills: dict[str, list[float]] = {}
        self.steps: dict[str, list[float]] = {key: [] for key in self.STEP_KEYS}

    def evaluated(self, round_: int, id_result: EvalResult, ood_accuracy: float) -> None:
        self.eval_rounds.append(round_)
        self.id_accuracy.append(id_result.accuracy)
        self.ood_accuracy.append(ood_accuracy)
        for skill in id_result.by_skill:
            self.id_skills.setdefault(skill, []).append(id_result.skill_accuracy(skill))

    def stepped(self, report: RoundReport, config: NodeConfig) -> None:
        step = report.step
        peer_sequences = step.peer_groups * config.generation.group_size
        filtered = step.filtered_fraction * step.sequences
        values = {
            "own_reward": report.own_reward,
            "filtered_fraction": step.filtered_fraction,
            "peer_filtered_fraction": filtered / peer_sequences if peer_sequences else 0.0,
            "filtered_advantage_fraction": step.filtered_advantage_fraction,
            "filtered_divergence_fraction": step.filtered_divergence_fraction,
            "filtered_implausible_fraction": step.filtered_implausible_fraction,  # too surprising to this node
            "is_weight_mean": step.is_weight_mean,
            "truncated_fraction": step.truncated_fraction,
            "peer_groups_used": float(report.peer_groups_used),
            "sequence_groups": float(step.sequence_groups),  # groups of another tokenizer, trained per sequence
            "trained": float(step.trained),
        }
        for key, value in values.items():
            self.steps[key].append(float(value))

    def as_dict(self) -> dict[str, Any]:
        return {"eval_rounds": self.eval_rounds, "id_accuracy": self.id_accuracy,
                "ood_accuracy": self.ood_accuracy, "id_skills": self.id_skills, "steps": self.steps}
