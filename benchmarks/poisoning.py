"""Poisoning, measured: an honest tiny-model node's held-out accuracy with and without an attacker
in its swarm, with the node's defences on and off.

Run (from the repo root):  python -m benchmarks.poisoning [--rounds N] [--seeds 0 1 2] [--quick] [--out DIR]
--quick: 20 rounds, one seed, 100 evaluation problems (a couple of minutes once the warm starts are cached).

Setting: the demo's task (three one-digit operands with + and -, ``7-2+9=`` -> ``14``, plain format) and two
honest nodes warm-started as in the demo, ``small`` (tiny-small, full) — the node the issue measures — and
``medium`` (tiny-medium, full), its honest peer; 16 prompts × 8 completions a round each, GRPO lr 1e-4,
greedy evaluation on 300 fixed held-out problems at round 0, every 10 rounds and at the end. In the
attacked conditions a third member of the swarm, the attacker (``poisoning_attack.py``), publishes every
round 16 groups × 8 completions on the task's training prompts: half answer ``99`` (a value no problem
has) claiming reward 1, half give other wrong answers claiming reward 0, every token claiming sampler
log-prob 0, under a data set name the honest nodes lack with ``99`` as its gold answer.

Conditions (each at every seed; the honest nodes' seeds, warm starts and settings are the same in all):
- ``clean``: no attacker; F-TIS, the defaults.
- ``defended``: the attacker; the defaults: rewards recomputed against gold the node trusts (its own data
  set's; a peer's answer only with ``trust_peer_answers``, off by default) and F-TIS.
- ``filter-only``: the attacker; the node trusts peers' answers for data sets it lacks, so the attacker's
  gold, and with it its rewards, are believed; F-TIS's filter and truncated weights still apply.
- ``undefended``: the attacker; peers' answers trusted and ``nois`` (no importance weight, no filter).

Measured per node: held-out accuracy at the start and the end and its mean over the evaluations (AUC);
the attack success rate (the fraction of held-out answers equal to ``99``); and, from an audit of every
step (``StepAudit``), the share of the attacker's completions the node trained on with a positive
advantage. Differences against ``clean`` are paired by seed. Cells are written to ``DIR/cells/`` as they
finish (a rerun skips them) and the report to ``DIR/report.md``.

In process, in lockstep, over the in-memory transport: the experiment's machinery (``ftis.node.experiment``:
``run_cell`` with ``CellExtras``), which runs the networked node's code on the same wire bytes.
"""

import argparse
import hashlib
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ftis.node.experiment.grid import Cell, Grid
from ftis.node.experiment.stats import Spread, auc, final
from ftis.node.experiment.store import read_cell, write_atomic, write_cell

ATTACKER_ID = "attacker"
HONEST = "small"  # the node the issue measures; "medium" is its honest peer
GOAL_POINTS = 1.0  # |defended − clean| in held-out accuracy, paired by seed
ATTACKED = {"clean": False, "defended": True, "filter-only": True, "undefended": True}  # the conditions run
TRUSTING = {"task": {"trust_peer_answers": True}}
GRID: dict[str, Any] = {
    "seeds": 3,
    "rounds": 100,
    "eval_every": 10,
    "eval_problems": 300,
    "warmup_seed": 0,
    "reference": "solo",  # the experiment's grid needs a solo reference; not run here (the reference is clean)
    "node": {
        "task": {"name": "arithmetic", "arithmetic": {"max_digits": 1, "operands": 3, "operations": "+-"}},
        "generation": {"prompts_per_round": 16, "group_size": 8, "max_new_tokens": 6, "batch_size": 64},
    },
    "models": {
        HONEST: {"name": "tiny-small", "learning_rate": 1e-4,
                 "warmup": {"steps": 500, "learning_rate": 3e-3, "batch_size": 32}},
        "medium": {"name": "tiny-medium", "learning_rate": 1e-4,
                   "warmup": {"steps": 300, "learning_rate": 1e-3, "batch_size": 32}},
    },
    "conditions": {
        "solo": {"swarm": False},
        "clean": {"variant": "ftis"},
        "defended": {"variant": "ftis"},
        "filter-only": {"variant": "ftis", "node": TRUSTING},
        "undefended": {"variant": "nois", "node": TRUSTING},
    },
    "quick": {"seeds": 1, "rounds": 20, "eval_every": 10, "eval_problems": 100, "warmup_steps": 500},
}


def benchmark_grid(*, quick: bool = False, rounds: int | None = None) -> Grid:
    return Grid.model_validate(GRID).adjusted(quick=quick, rounds=rounds)


def fingerprint(grid: Grid, condition: str) -> str:
    """What decides a cell: the experiment's fingerprint of the condition, plus the attack."""
    from benchmarks.poisoning_attack import CLAIMED_LOGPROB, FIXED_ANSWER, FOREIGN_DATASET, AttackSettings

    attack = {"attacked": ATTACKED[condition], "settings": asdict(AttackSettings()), "fixed": FIXED_ANSWER,
              "dataset": FOREIGN_DATASET, "logprob": CLAIMED_LOGPROB}
    blob = json.dumps([grid.fingerprint(condition), attack], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def run_poisoning_cell(grid: Grid, cell: Cell, warm: dict[str, Path]) -> dict[str, Any]:
    """One cell: the experiment's ``run_cell`` plus, when the condition is attacked, the attacker; every node's
    steps audited and its attack success measured at each evaluation. The record is the experiment's, with
    ``poisoning`` added."""
    from benchmarks.poisoning_attack import Attacker, AttackSettings, StepAudit, attack_success, top_answers
    from ftis.node.experiment.cell import CellExtras, run_cell
    from ftis.node.models import build_tokenizer, tokenizer_fingerprint
    from ftis.node.tasks import build_task

    settings = AttackSettings()
    audits: dict[str, StepAudit] = {}
    success: dict[str, list[float]] = {label: [] for label in grid.models}
    answers: dict[str, list[list[tuple[str | None, float]]]] = {label: [] for label in grid.models}

    def make_attacker(swarm):
        config = grid.node_config(HONEST, cell.condition, cell.seed, Path("model"))
        tokenizer = build_tokenizer()  # the tiny models' shared tokenizer
        fp = tokenizer_fingerprint(tokenizer)
        return Attacker(swarm.transport(ATTACKER_ID, fp), build_task(config.task), tokenizer, fp,
                        config.swarm.run_id, settings, seed=cell.seed)

    def built(nodes):
        audits.update({label: StepAudit(node, ATTACKER_ID) for label, node in nodes.items()})

    def evaluated(label, done, result):
        success[label].append(attack_success(result))
        answers[label].append(top_answers(result))

    extras = CellExtras(members=[make_attacker] if ATTACKED[cell.condition] else [], built=built,
                        evaluated=evaluated)
    record = run_cell(grid, cell, warm, extras)
    record["fingerprint"] = fingerprint(grid, cell.condition)
    record["poisoning"] = {
        "attacked": ATTACKED[cell.condition],
        "attack": {**asdict(settings), "published_per_round": settings.groups * settings.group_size},
        "nodes": {label: {"attack_success": success[label], "top_answers": answers[label],
                          **audits[label].log.as_dict()} for label in grid.models},
    }
    return record


def run_benchmark(grid: Grid, seeds: list[int], out: Path, echo=print) -> list[dict[str, Any]]:
    """Every (condition, seed) cell not yet in ``out``, seed-major; all records."""
    import torch

    from ftis.node.experiment.cell import prepare_warm_starts

    cells = [Cell(condition, seed) for seed in seeds for condition in ATTACKED]
    records = {cell: read_cell(out, cell, fingerprint(grid, cell.condition)) for cell in cells}
    todo = [cell for cell in cells if records[cell] is None]
    echo(f"poisoning: {len(cells)} cells ({len(ATTACKED)} conditions × {len(seeds)} seeds, {grid.rounds} rounds) "
         f"in {out}; {len(cells) - len(todo)} finished already")
    if todo:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # one thread per node: the lockstep's threads share the cores
        try:
            warm = prepare_warm_starts(grid, echo)
            for k, cell in enumerate(todo, start=1):
                record = run_poisoning_cell(grid, cell, warm)
                write_cell(out, cell, record)
                records[cell] = record
                echo(f"[{k}/{len(todo)}] {cell.name}: {record['wall_seconds']:.0f} s  {_cell_line(record)}")
        finally:
            torch.set_num_threads(threads)
    return [records[cell] for cell in cells]


def _cell_line(record: dict[str, Any]) -> str:
    nodes = record["poisoning"]["nodes"]
    return "  ".join(f"{label} acc {100 * node['id_accuracy'][0]:.1f}→{100 * node['id_accuracy'][-1]:.1f}% "
                     f"attack {100 * nodes[label]['attack_success'][-1]:.1f}%"
                     for label, node in record["nodes"].items())


# Per node of a cell: a record -> one number (accuracies and rates in %).
def _measures(record: dict[str, Any], label: str) -> dict[str, float]:
    node, poison = record["nodes"][label], record["poisoning"]["nodes"][label]
    published = record["poisoning"]["attack"]["published_per_round"] * record["rounds"]
    return {
        "start": 100 * node["id_accuracy"][0],
        "end": 100 * final(node["id_accuracy"]),
        "auc": 100 * auc(node["id_accuracy"]),
        "success_start": 100 * poison["attack_success"][0],
        "success_end": 100 * final(poison["attack_success"]),
        "success_peak": 100 * max(poison["attack_success"]),
        "raised": 100 * sum(poison["raised"]) / published if record["poisoning"]["attacked"] else float("nan"),
    }


def summarize(records: list[dict[str, Any]], labels: list[str]) -> list[dict[str, Any]]:
    """One row per condition × node: each measure's spread over seeds, and the paired differences against
    ``clean`` of the end accuracy, the AUC and the attack success."""
    by_cell = {(r["condition"], r["seed"]): r for r in records}
    rows = []
    for condition in ATTACKED:
        seeds = sorted(seed for (c, seed) in by_cell if c == condition)
        if not seeds:
            continue
        for label in labels:
            mine = {seed: _measures(by_cell[condition, seed], label) for seed in seeds}
            clean = {seed: _measures(by_cell["clean", seed], label) for seed in seeds if ("clean", seed) in by_cell}
            paired = sorted(mine.keys() & clean.keys())
            rows.append({
                "condition": condition, "node": label, "seeds": seeds,
                "values": {key: Spread.of(m[key] for m in mine.values()) for key in next(iter(mine.values()))},
                "deltas": {key: Spread.of(mine[s][key] - clean[s][key] for s in paired)
                           for key in ("end", "auc", "success_end")},
            })
    return rows


def _spread(value: Spread, signed: bool = False) -> str:
    if value.n == 0 or value.mean != value.mean:
        return "—"
    mean = f"{value.mean:+.1f}" if signed else f"{value.mean:.1f}"
    return mean if value.n < 2 else f"{mean} ± {value.std:.1f}"


def report_table(rows: list[dict[str, Any]]) -> str:
    head = ("| condition | node | accuracy start | accuracy end | Δ end vs clean | AUC | Δ AUC vs clean | "
            "attack success start → end (peak) | attacker completions trained up |\n|" + "---|" * 9)
    lines = [head]
    for row in rows:
        v, d = row["values"], row["deltas"]
        clean = row["condition"] == "clean"
        lines.append(
            f"| {row['condition']} | {row['node']} | {_spread(v['start'])} | {_spread(v['end'])} | "
            f"{'—' if clean else _spread(d['end'], True)} | {_spread(v['auc'])} | "
            f"{'—' if clean else _spread(d['auc'], True)} | "
            f"{_spread(v['success_start'])} → {_spread(v['success_end'])} ({_spread(v['success_peak'])}) | "
            f"{_spread(v['raised'])} |")
    return "\n".join(lines)


def verdict(rows: list[dict[str, Any]]) -> str:
    """Whether the defended node stayed within ``GOAL_POINTS`` of clean (end accuracy and AUC, paired)."""
    row = next((r for r in rows if r["condition"] == "defended" and r["node"] == HONEST), None)
    if row is None or row["deltas"]["end"].n == 0:
        return "goal: not measured (no paired defended and clean cells)"
    end, area = row["deltas"]["end"].mean, row["deltas"]["auc"].mean
    met = abs(end) <= GOAL_POINTS and abs(area) <= GOAL_POINTS
    return (f"goal |defended − clean| ≤ {GOAL_POINTS:g} point for {HONEST}: end {end:+.2f}, AUC {area:+.2f} "
            f"-> {'met' if met else 'NOT met'}")


def write_report(rows: list[dict[str, Any]], grid: Grid, out: Path, command: str, seconds: float,
                 load: str) -> Path:
    text = (f"# Poisoning\n\n`{command}`, {time.strftime('%Y-%m-%d %H:%M')}, {grid.rounds} rounds, "
            f"{grid.eval_problems} held-out problems, {seconds:.0f} s this run, load average {load}.\n\n"
            "Accuracy and attack success in % of held-out problems; mean ± std over seeds; Δ paired by seed; "
            "*peak*: the highest attack success at any evaluation. "
            "*Attacker completions trained up*: % of the attacker's published completions that a step trained "
            "on with a positive advantage.\n\n" + report_table(rows) + "\n\n" + verdict(rows) + "\n")
    return write_atomic(out / "report.md", text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=None, help="rounds per cell (default 100; --quick 20)")
    parser.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds (default 0 1 2; --quick 0)")
    parser.add_argument("--quick", action="store_true", help="a couple of minutes: fewer rounds, one seed")
    parser.add_argument("--out", type=Path, default=None, help="default runs/poisoning (or runs/poisoning-quick)")
    args = parser.parse_args()
    grid = benchmark_grid(quick=args.quick, rounds=args.rounds)
    seeds = args.seeds if args.seeds is not None else list(range(grid.seeds))
    out = args.out or Path("runs/poisoning-quick" if args.quick else "runs/poisoning")
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    records = run_benchmark(grid, seeds, out)
    rows = summarize(records, list(grid.models))
    command = "python -m benchmarks.poisoning " + " ".join(sys.argv[1:])
    load = f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (1 min)"
    seconds = time.perf_counter() - started
    path = write_report(rows, grid, out, command.strip(), seconds, load)
    print(report_table(rows))
    print(verdict(rows))
    print(f"{seconds:.0f} s, load average {load}")
    print(f"report: {path}")


if __name__ == "__main__":
    main()
