"""One cell of the grid: a condition at a seed, run to the end, as a JSON-ready record.

    warm = prepare_warm_starts(grid, echo=print)  # once per grid: {label: warmed model folder}
    record = run_cell(grid, Cell("ftis", 0), warm)

A swarm condition builds every model's node on one ``LockstepSwarm``; a solo condition builds each on
a swarm of its own (they still run side by side, each alone). Each round every node runs
``Node.run_round`` in its own thread (``lockstep.py``). Greedy evaluations of every node on the
in-distribution and OOD splits happen before round 0, after every ``eval_every`` rounds and after the
last one, on the same fixed problems each time.

The record (``CELL_SCHEMA``): per node, the evaluation rounds and both accuracy curves, and per round
its own sampling reward and the step's figures: filtered fraction of all completions trained on and
of the peers' completions, mean IS weight over trained tokens, fraction of tokens truncated at C,
peer groups used, and whether a step was taken at all (a round whose groups all had equal rewards
takes none; its step figures are zeros, which the report leaves out). The fraction of peers'
completions filtered is ``filtered_fraction × sequences / (peer_groups × group_size)``: the filter
touches peers' completions only (``filter_local`` is off), and every node of a grid shares
``group_size``.
"""

import gc
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ftis.node.config import ModelConfig, NodeConfig
from ftis.node.experiment.grid import Cell, Grid
from ftis.node.experiment.lockstep import LockstepSwarm, in_parallel, step_round
from ftis.node.runner.node import Node, RoundReport

CELL_SCHEMA = 1  # bump when the record's layout changes
Echo = Callable[[str], None]


def prepare_warm_starts(grid: Grid, echo: Echo | None = None) -> dict[str, Path]:
    """Every model's warm start, trained now (all at once, a thread each) or found in the cache:
    {label: model folder}. Two models with one recipe share a folder (the cache's lock makes one wait)."""
    from ftis.node.warmup import warm_start, warmup_spec

    def prepare(label: str) -> Path:
        spec = grid.models[label]
        task = grid.node_config(label, next(iter(grid.conditions)), 0, Path("model")).task
        model = ModelConfig(name=spec.name, seed=grid.warmup_seed, warmup=spec.warmup)
        say = (lambda line: echo(f"{label}: {line}")) if echo else None
        return warm_start(warmup_spec(model, task), spec.warmup.cache_dir, say).path

    labels = list(grid.models)
    return dict(zip(labels, in_parallel([lambda label=label: prepare(label) for label in labels]), strict=True))


def eval_rounds(rounds: int, every: int) -> list[int]:
    """The rounds completed at each evaluation: 0, every, 2·every, … and the last."""
    return sorted({*range(0, rounds, every), rounds})


def run_cell(grid: Grid, cell: Cell, warm: dict[str, Path]) -> dict[str, Any]:
    """Run ``cell`` to the end and return its record (nothing is written here)."""
    from ftis.node.runner.join import build_node

    started = time.perf_counter()
    condition = grid.conditions[cell.condition]
    configs = {label: grid.node_config(label, cell.condition, cell.seed, warm[label]) for label in grid.models}
    first = next(iter(configs.values()))
    shared = LockstepSwarm(len(configs), first.swarm) if condition.swarm else None
    swarms: list[LockstepSwarm] = []
    nodes: dict[str, Node] = {}
    try:
        for label, config in configs.items():
            swarm = shared or LockstepSwarm(1, config.swarm)
            swarms.append(swarm)
            nodes[label] = build_node(config, transport_factory=lambda fp, s=swarm, p=label: s.transport(p, fp))
        curves = {label: _Curves() for label in nodes}
        barriers = list({id(s): s.barrier for s in swarms}.values())
        due = eval_rounds(grid.rounds, grid.eval_every)
        for done in range(grid.rounds + 1):
            if done in due:
                results = in_parallel([lambda n=n: _evaluate(grid, n) for n in nodes.values()])
                for curve, (id_accuracy, ood_accuracy) in zip(curves.values(), results, strict=True):
                    curve.evaluated(done, id_accuracy, ood_accuracy)
            if done < grid.rounds:
                reports = step_round(list(nodes.values()), barriers)
                for (label, curve), report in zip(curves.items(), reports, strict=True):
                    curve.stepped(report, configs[label])
    finally:
        for node in nodes.values():
            node.transport.close()
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


def _evaluate(grid: Grid, node: Node) -> tuple[float, float]:
    """Greedy accuracy of ``node`` on the in-distribution and OOD splits."""
    from ftis.node.runner.evaluation import evaluate

    config = node.config
    settings = {"limit": grid.eval_problems, "chat": node.chat,
                "batch_size": config.eval.batch_size or config.generation.batch_size,
                "max_new_tokens": config.eval.max_new_tokens or config.generation.max_new_tokens}
    return (evaluate(node.policy, node.task, grid.id_split, **settings).accuracy,
            evaluate(node.policy, node.task, grid.ood_split, **settings).accuracy)


class _Curves:
    """One node's figures over a cell."""

    STEP_KEYS = ("own_reward", "filtered_fraction", "peer_filtered_fraction", "is_weight_mean",
                 "truncated_fraction", "peer_groups_used", "trained")

    def __init__(self) -> None:
        self.eval_rounds: list[int] = []
        self.id_accuracy: list[float] = []
        self.ood_accuracy: list[float] = []
        self.steps: dict[str, list[float]] = {key: [] for key in self.STEP_KEYS}

    def evaluated(self, round_: int, id_accuracy: float, ood_accuracy: float) -> None:
        self.eval_rounds.append(round_)
        self.id_accuracy.append(id_accuracy)
        self.ood_accuracy.append(ood_accuracy)

    def stepped(self, report: RoundReport, config: NodeConfig) -> None:
        step = report.step
        peer_sequences = step.peer_groups * config.generation.group_size
        filtered = step.filtered_fraction * step.sequences
        values = {
            "own_reward": report.own_reward,
            "filtered_fraction": step.filtered_fraction,
            "peer_filtered_fraction": filtered / peer_sequences if peer_sequences else 0.0,
            "is_weight_mean": step.is_weight_mean,
            "truncated_fraction": step.truncated_fraction,
            "peer_groups_used": float(report.peer_groups_used),
            "trained": float(step.trained),
        }
        for key, value in values.items():
            self.steps[key].append(float(value))

    def as_dict(self) -> dict[str, Any]:
        return {"eval_rounds": self.eval_rounds, "id_accuracy": self.id_accuracy,
                "ood_accuracy": self.ood_accuracy, "steps": self.steps}
