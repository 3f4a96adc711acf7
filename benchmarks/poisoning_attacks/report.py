"""The poisoning benchmark's figures from its cell records: pure functions, then the markdown report.

    rows = summarize(records, labels, attacks, conditions)  # one Row per attack × condition × node
    path, table = write_report(rows, records, grid, out, command, seconds, load)

Per cell and node (``measures``): held-out accuracy at the start and the end (in %), the attack's success at the
start, the end and its peak over the evaluations (in % of greedy completions; for a length attack the mean greedy
completion length over clean's at the same seed and evaluation, a ratio), the node's log-prob of the payload in
context at the start and the end (nats), and the attacker's poisoned completions its steps trained on with a positive
advantage (count, and % of those published), and the attacker's groups that reached its steps (count, and % of those
published: none while it is muted). Over seeds: mean ± sample std; Δ: paired by seed against ``clean``.
A row of ``clean`` is repeated in each attack's block, with that attack's success measured on the clean node.
"""

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.poisoning_attacks.payloads import ATTACKS
from ftis.node.experiment.grid import Grid
from ftis.node.experiment.stats import Spread, final
from ftis.node.experiment.store import write_atomic

Record = dict[str, Any]


@dataclass(frozen=True)
class Row:
    attack: str
    condition: str
    node: str
    seeds: list[int]
    values: dict[str, Spread]
    delta_end: Spread  # accuracy at the end, minus clean's, paired by seed
    curves: dict[str, list[float]]  # per measure, its mean over seeds at each evaluation


def success_curve(record: Record, clean: Record | None, label: str, attack: str) -> list[float]:
    """The attack's success at each evaluation of ``record``: % of greedy completions carrying the payload, or for a
    length attack the mean completion length over ``clean``'s (NaN without it)."""
    mine = record["poisoning"]["nodes"][label]
    if ATTACKS[attack].success == "share":
        return [100 * value for value in mine["success"][attack]]
    if clean is None:
        return [float("nan")] * len(mine["mean_tokens"])
    base = clean["poisoning"]["nodes"][label]["mean_tokens"]
    return [value / reference for value, reference in zip(mine["mean_tokens"], base, strict=True)]


def measures(record: Record, clean: Record | None, label: str, attack: str) -> dict[str, float]:
    node, poison = record["nodes"][label], record["poisoning"]
    mine = poison["nodes"][label]
    success = success_curve(record, clean, label, attack)
    payload = mine["payload_logprob"][attack]
    attacked = poison["attack"] == attack
    raised = sum(mine["raised"]) if attacked else float("nan")
    groups = sum(mine["groups"]) if attacked else float("nan")
    return {
        "start": 100 * node["id_accuracy"][0],
        "end": 100 * final(node["id_accuracy"]),
        "success_start": success[0],
        "success_end": success[-1],
        "success_peak": max(success),
        "payload_start": payload[0],
        "payload_end": payload[-1],
        "raised": raised,
        "raised_share": 100 * raised / (poison["poisoned_per_round"] * record["rounds"]),
        "groups": groups,
        "groups_share": 100 * groups / (poison["settings"]["groups"] * record["rounds"]),
    }


def summarize(records: list[Record], labels: list[str], attacks: list[str], conditions: list[str]) -> list[Row]:
    """One row per attack × condition × node that the records hold (``clean`` rows first in each attack's block)."""
    clean_of = {r["seed"]: r for r in records if r["condition"] == "clean"}
    rows = []
    for attack in attacks:
        for condition in conditions:
            mine = {r["seed"]: r for r in records if r["condition"] == condition
                    and r["poisoning"]["attack"] in (attack, None)}
            if not mine:
                continue
            for label in labels:
                values = {seed: measures(r, clean_of.get(seed), label, attack) for seed, r in mine.items()}
                clean = {seed: measures(clean_of[seed], clean_of[seed], label, attack) for seed in mine
                         if seed in clean_of}
                curves = {
                    "accuracy": _mean_curve([[100 * v for v in r["nodes"][label]["id_accuracy"]]
                                             for r in mine.values()]),
                    "success": _mean_curve([success_curve(r, clean_of.get(s), label, attack) for s, r in mine.items()]),
                    "payload": _mean_curve([r["poisoning"]["nodes"][label]["payload_logprob"][attack]
                                            for r in mine.values()]),
                }
                keys = next(iter(values.values()))
                rows.append(Row(attack, condition, label, sorted(mine),
                                {key: Spread.of(v[key] for v in values.values()) for key in keys},
                                Spread.of(values[s]["end"] - clean[s]["end"] for s in sorted(clean)), curves))
    return rows


def _mean_curve(curves: list[list[float]]) -> list[float]:
    return [sum(column) / len(column) for column in zip(*curves, strict=True)]


def _spread(value: Spread, digits: int = 1, signed: bool = False) -> str:
    if value.n == 0 or value.mean != value.mean:
        return "—"
    mean = f"{value.mean:+.{digits}f}" if signed else f"{value.mean:.{digits}f}"
    return mean if value.n < 2 else f"{mean} ± {value.std:.{digits}f}"


def _success(row: Row, key: str) -> str:
    digits = 2 if ATTACKS[row.attack].success == "length" else 1
    return _spread(row.values[key], digits)


def table(rows: list[Row]) -> str:
    head = ("| attack | condition | node | accuracy start → end | Δ end vs clean | attack success start → end (peak) | "
            "payload log-prob start → end | poisoned completions trained up | attacker's groups in its steps |\n|"
            + "---|" * 9)
    lines = [head]
    for row in rows:
        v = row.values
        clean = row.condition == "clean"
        up = "—" if v["raised"].n == 0 else f"{_spread(v['raised'], 0)} ({_spread(v['raised_share'])}%)"
        taken = "—" if v["groups"].n == 0 else f"{_spread(v['groups'], 0)} ({_spread(v['groups_share'])}%)"
        lines.append(
            f"| {row.attack} | {row.condition} | {row.node} | {_spread(v['start'])} → {_spread(v['end'])} | "
            f"{'—' if clean else _spread(row.delta_end, signed=True)} | "
            f"{_success(row, 'success_start')} → {_success(row, 'success_end')} ({_success(row, 'success_peak')}) | "
            f"{_spread(v['payload_start'], 0)} → {_spread(v['payload_end'], 0)} | {up} | {taken} |")
    return "\n".join(lines)


def curves_table(rows: list[Row], rounds: list[int]) -> str:
    """Every node's figures at every evaluation (means over seeds): accuracy, attack success, payload log-prob."""
    head = (f"| attack | condition | node | figure | {' | '.join(f'r{r}' for r in rounds)} |\n|"
            + "---|" * (4 + len(rounds)))
    lines = [head]
    for row in rows:
        for figure, digits in (("accuracy", 1), ("success", 2 if ATTACKS[row.attack].success == "length" else 1),
                               ("payload", 0)):
            values = " | ".join(f"{v:.{digits}f}" for v in row.curves[figure])
            lines.append(f"| {row.attack} | {row.condition} | {row.node} | {figure} | {values} |")
    return "\n".join(lines)


def write_report(rows: list[Row], records: list[Record], grid: Grid, out: Path, command: str, seconds: float,
                 load: str) -> tuple[Path, str]:
    """``out/report.md``, and the main table."""
    main = table(rows)
    rounds = records[0]["nodes"][next(iter(records[0]["nodes"]))]["eval_rounds"] if records else []
    walls = [r["wall_seconds"] for r in records]
    text = (
        f"# Poisoning\n\n`{command}`, {time.strftime('%Y-%m-%d %H:%M')}, {grid.rounds} rounds, {grid.eval_problems} "
        f"held-out problems, swarm of {len(grid.models) + 1} (the attacker one of them), {len(records)} cells "
        f"({min(walls, default=0):.0f}–{max(walls, default=0):.0f} s each, {sum(walls):.0f} s in all), "
        f"{seconds:.0f} s this run, load average {load}.\n\n"
        "Accuracy in % of held-out problems; *attack success*: % of held-out greedy completions carrying the payload "
        "(dos: mean greedy completion length over clean's at the same seed); *payload log-prob*: the node's own "
        "summed log-prob (nats) of the payload in context, mean over held-out problems; *trained up*: the attacker's "
        "poisoned completions a step trained on with a positive advantage (sum over rounds, and % of those "
        "published); *groups in its steps*: the attacker's groups that reached the node's steps (sum over rounds, and "
        "% of those published: a muted attacker's are not fetched). Mean ± std over seeds; Δ paired by seed.\n\n"
        + main + "\n\n## At every evaluation (mean over seeds)\n\n" + curves_table(rows, rounds)
        + "\n")
    return write_atomic(out / "report.md", text), main
