"""The experiment's report: ``report.md`` and the PNG figures, from the finished cells in the output folder.

    paths = write_report(grid, out, command="ftis-node experiment --out runs/experiment")

Built at the end of a run and on every rerun, from whatever cells are finished (a partial grid gives a
partial report, and says so). Cells of other settings in the folder are refused (``store.py``).
"""

import math
import time
from pathlib import Path

from ftis.node.atomic import write_atomic
from ftis.node.experiment.grid import Grid
from ftis.node.experiment.plots import plot_accuracy, plot_filtering
from ftis.node.experiment.stats import ModelRow, Record, Spread, condition_rows, model_rows, pair_rows, weakest_skill
from ftis.node.experiment.store import read_cell

REPORT = "report.md"
PAIRED = ("id_final", "id_auc", "skill_final", "ood_final")  # the measures of the paired comparisons' table
FIGURES = {"id": "accuracy_id.png", "ood": "accuracy_ood.png", "filtering": "filtering.png"}


def finished_cells(grid: Grid, out: Path) -> list[Record]:
    records = []
    for cell in grid.cells():
        record = read_cell(out, cell, grid.fingerprint(cell.condition))
        if record is not None:
            records.append(record)
    return records


def write_report(grid: Grid, out: Path, command: str) -> list[Path]:
    """Write ``report.md`` and the figures into ``out``; returns their paths (no figures without cells)."""
    records = finished_cells(grid, out)
    conditions, models = list(grid.conditions), list(grid.models)
    written = []
    if records:
        written += [
            plot_accuracy(records, conditions, models, "id", f"In-distribution greedy accuracy ({grid.id_split} "
                          "split; mean ± std over seeds)", out / FIGURES["id"]),
            plot_accuracy(records, conditions, models, "ood", f"Out-of-distribution greedy accuracy "
                          f"({grid.ood_split} split; mean ± std over seeds)", out / FIGURES["ood"]),
            plot_filtering(records, conditions, out / FIGURES["filtering"]),
        ]
    written.insert(0, write_atomic(out / REPORT, render(grid, records, command)))
    return written


def render(grid: Grid, records: list[Record], command: str) -> str:
    """The report's markdown."""
    total = len(grid.cells())
    lines = [
        "# ftis-node experiment: the paper's grid in miniature",
        "",
        f"Command: `{command}`  ",
        f"Written {time.strftime('%Y-%m-%d %H:%M:%S')}; {len(records)} of {total} cells finished"
        + ("." if len(records) == total else " (**partial**: the tables cover the finished cells only)."),
        "",
        *_setup(grid, records),
        "",
    ]
    if not records:
        return "\n".join([*lines, "No cell has finished yet.", ""])
    rows = model_rows(records, list(grid.conditions), list(grid.models), grid.reference)
    seeds = sorted({record["seed"] for record in records})
    ref = grid.reference
    for split, title in (("id", f"In-distribution accuracy (`{grid.id_split}` split)"),
                         ("ood", f"Out-of-distribution accuracy (`{grid.ood_split}` split)")):
        lines += [
            f"## {title}",
            "",
            f"Greedy accuracy on {grid.eval_problems} fixed problems, in %, mean ± std over seeds ({len(seeds)} "
            f"seed{'s' if len(seeds) > 1 else ''}: {', '.join(map(str, seeds))}). *Final*: after round "
            f"{grid.rounds}; *mean*: over all evaluations (every {grid.eval_every} rounds, round 0 included), the "
            f"area under the curve. *Δ*: paired by seed against `{ref}`.",
            "",
            *_table(rows, ("final", f"{split}_final"), (f"Δ final vs {ref}", f"{split}_final", True),
                    ("mean", f"{split}_auc"), (f"Δ mean vs {ref}", f"{split}_auc", True)),
            "",
        ]
    skills = {label: next((weakest_skill(r["nodes"][label]) for r in records if label in r["nodes"]), None)
              for label in grid.models}
    if any(skills.values()):
        named = ", ".join(f"{label}: {skill}" for label, skill in skills.items() if skill)
        lines += [
            "## Each model's weakest skill",
            "",
            f"In-distribution accuracy on the problems of the skill each model was worst at before any GRPO step "
            f"({named}), in %, mean ± std over seeds: a specialist's missing skill, and what it learns from peers.",
            "",
            *_table(rows, ("final", "skill_final"), (f"Δ final vs {ref}", "skill_final", True),
                    ("mean", "skill_auc"), (f"Δ mean vs {ref}", "skill_auc", True)),
            "",
        ]
    pairs = [(name, ref) for name in grid.conditions if name != ref and grid.conditions[name].variant == "ftis"
             and grid.conditions[name].grouping == "vertical" and grid.conditions[name].swarm]
    comparisons = pair_rows(records, [*pairs, *grid.comparisons], list(grid.models))
    if comparisons:
        lines += [
            "## Paired comparisons",
            "",
            "The first condition minus the second, seed by seed, in points: mean ± standard error over seeds, "
            "and in brackets how many seeds came out ahead. In-distribution final and mean (AUC), the weakest skill's "
            "final accuracy, and out-of-distribution final.",
            "",
            "| comparison | model | ID final | ID mean | skill final | OOD final |",
            "|---|---|---|---|---|---|",
            *(f"| {row.first} − {row.second} | {row.model} | "
              + " | ".join(_paired(row.deltas[key]) for key in PAIRED) + " |" for row in comparisons),
            "",
        ]
    lines += [
        "## Sampling accuracy on the training prompts",
        "",
        "The reward GRPO raises directly: the share of each node's own sampled completions that are correct "
        "(temperature as set), mean over the first and the last quarter of the rounds, in %. Many more samples "
        "than an evaluation, but not held out: the prompts are the training draws (the same at a seed in every "
        "vertical condition; horizontal grouping draws shared prompts instead).",
        "",
        *_table(rows, ("first quarter", "reward_early"), ("last quarter", "reward_late"),
                (f"Δ last quarter vs {ref}", "reward_late", True)),
        "",
    ]
    lines += [
        "## Filtering and importance weights",
        "",
        "Per condition, mean ± std over seeds of each cell's mean over its nodes' optimizer steps. *Peers "
        "filtered*: share of the peers' completions the filter dropped (Â ≤ 0 or D > g); *all filtered*: share "
        "of all completions trained on, then split by the reason (*by advantage*: Â ≤ 0; *by divergence*: "
        "D > g; a completion with both counts in both); *IS weight*: the weight the variant applies, mean over "
        "trained tokens (own tokens included); *truncated*: tokens whose weight was cut at C; *per sequence*: groups "
        "of another tokenizer trained on per step (one weight per completion); *own reward*: the "
        "nodes' sampling accuracy on their training prompts.",
        "",
        "| condition | peers filtered | all filtered | by advantage | by divergence | IS weight | truncated | "
        "peer groups/step | per sequence | own reward | s/cell |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in condition_rows(records, list(grid.conditions)):
        peer = (lambda s: "—") if not row.swarm else _pct
        lines.append(f"| {row.condition} | {peer(row.peer_filtered)} | {peer(row.filtered)} | "
                     f"{peer(row.filtered_advantage)} | {peer(row.filtered_divergence)} | "
                     f"{_num(row.is_weight, 3)} | {_pct(row.truncated)} | {_num(row.peer_groups, 1)} | "
                     f"{_num(row.sequence_groups, 1)} | "
                     f"{_pct(row.own_reward)} | {_num(row.wall_seconds, 0)} |")
    lines += [
        "",
        "## Figures",
        "",
        *(f"![{key}]({name})" for key, name in FIGURES.items()),
        "",
    ]
    return "\n".join(lines)


def _setup(grid: Grid, records: list[Record]) -> list[str]:
    first = grid.node_config(grid.condition_models(grid.reference)[0], grid.reference, 0, Path("model"))
    gen, task = first.generation, first.task
    lines = [
        "## Set-up",
        "",
        f"- Task: `{task.name}` {dict(task.arithmetic)}; prompts from `{task.split}`, evaluation on "
        f"`{grid.id_split}` (in-distribution) and `{grid.ood_split}`.",
        f"- Each round, each node: {gen.prompts_per_round} prompts × {gen.group_size} completions "
        f"(temperature {gen.temperature:g}, at most {gen.max_new_tokens} tokens), one optimizer step on its "
        f"own groups plus its peers'; {grid.rounds} rounds per cell; loss settings "
        f"C = {first.loss.clip_c:g}, ε = {first.loss.epsilon:g}, g = {first.loss.divergence_threshold:g}, "
        f"rule `{first.loss.filter_rule}`, `{first.loss.advantage_norm}` advantages.",
        "- All nodes of a cell run in one process over the in-memory transport (the same wire bytes, checks and "
        "receive policy as the hivemind swarm, no network), stepped in lockstep: each round every node "
        "generates and publishes, then trains on its peers' batches of the same round. Fast, and reproducible "
        "up to floating-point summation order.",
        f"- Pairing: every model starts every cell from one warm start (seed {grid.warmup_seed} unless the table "
        "says otherwise); at seed s, each model's sampling, prompt order and LoRA initialisation are seeded the "
        "same in every condition it trains in.",
        "",
        "| model | base | adapter | GRPO lr | warm-up | warm-up data mix |",
        "|---|---|---|---|---|---|",
    ]
    for label, spec in grid.models.items():
        adapter = f"{spec.adapter}{f' (r {spec.lora_rank}, α {spec.lora_alpha:g})' if spec.adapter == 'lora' else ''}"
        w = spec.warmup
        if w is None:
            lines.append(f"| {label} | {spec.name} | {adapter} | {spec.learning_rate:g} | none: pretrained | — |")
            continue
        mix = dict(w.arithmetic) or "the task's"
        if w.no_carry_share:
            mix = f"{mix}, {w.no_carry_share:.0%} redrawn without a carry"
        stop = f", stop at dev ≥ {w.stop_accuracy:.0%} (checked every {w.check_every})" if w.stop_accuracy else ""
        if spec.warmup_seed is not None:
            stop += f", seed {spec.warmup_seed}"
        lines.append(f"| {label} | {spec.name} | {adapter} | {spec.learning_rate:g} | "
                     f"≤ {w.steps} steps, {w.schedule} lr {w.learning_rate:g}{stop} | {mix} |")
    lines += ["", "| condition | models | trains | loss variant | grouping | node settings changed |",
              "|---|---|---|---|---|---|"]
    for name, cond in grid.conditions.items():
        models = "all" if cond.models is None else ", ".join(grid.condition_models(name))
        lines.append(f"| {name} | {models} | {'together' if cond.swarm else 'each model alone'} | `{cond.variant}` | "
                     f"{cond.grouping} | {cond.node or '—'} |")
    if records:
        seconds = sum(record["wall_seconds"] for record in records)
        lines += ["", f"Cells took {seconds / 60:.1f} minutes of wall time in all (warm starts not included)."]
    return lines


def _table(rows: list[ModelRow], *columns: tuple) -> list[str]:
    """Markdown rows: condition, model, then per column (title, measure) its spread, or (title, measure,
    True) its paired difference against the reference; and the seeds."""
    head = "| condition | model | " + " | ".join(column[0] for column in columns) + " | seeds |"
    lines = [head, "|---" * (len(columns) + 3) + "|"]
    for row in rows:
        cells = [_pct(row.deltas.get(c[1]), signed=True) if len(c) > 2 else _pct(row.values[c[1]]) for c in columns]
        lines.append(f"| {row.condition} | {row.model} | {' | '.join(cells)} | {row.values[columns[0][1]].n} |")
    return lines


def _pct(spread: Spread | None, signed: bool = False) -> str:
    if spread is None:
        return "—"
    if spread.n == 0 or math.isnan(spread.mean):
        return "n/a"
    mean = f"{100 * spread.mean:+.1f}" if signed else f"{100 * spread.mean:.1f}"
    return mean if math.isnan(spread.std) else f"{mean} ± {100 * spread.std:.1f}"


def _paired(spread: Spread) -> str:
    """``+3.1 ± 1.2 (3/3)``: a paired difference in points, its standard error, the seeds ahead."""
    if spread.n == 0:
        return "n/a"
    error = "" if math.isnan(spread.standard_error) else f" ± {100 * spread.standard_error:.1f}"
    return f"{100 * spread.mean:+.1f}{error} ({spread.positive}/{spread.n})"


def _num(spread: Spread, digits: int) -> str:
    if spread.n == 0 or math.isnan(spread.mean):
        return "n/a"
    mean = f"{spread.mean:.{digits}f}"
    return mean if math.isnan(spread.std) else f"{mean} ± {spread.std:.{digits}f}"
