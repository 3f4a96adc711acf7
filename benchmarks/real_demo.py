"""The real demo over seeds: is every node ahead of its start, and of the same model trained alone, on every seed?

Run (from the repo root, after ``ftis-node models fetch --all``):
    python -m benchmarks.real_demo [--config examples/demo-real.toml] [--seeds 0 1 2] [--out runs/real-demo]
        [--rounds N] [--nois] [--json FILE]

Each seed is the demo itself, ``ftis-node demo --config FILE`` as a user runs it (``run_demo``: real processes over
real hivemind on 127.0.0.1, then each node's solo run from the same start), with ``[common.model] seed`` set to the
seed: the nodes' sampling, the LoRA adapters' initialisation and the peers' timing differ; the models and the
held-out problems do not. A seed whose folder already holds the demo's ``summary.json`` is read, not run again (a
long benchmark resumes where it stopped).

Figures, per seed and node, from the demo's own summary: held-out greedy accuracy at the start, the end and the solo
run's end, each ± one standard error (binomial, over the same problems), the gain over the start, and the end's
lead over the solo run in standard errors of that difference (sqrt(se_end² + se_solo²)); per seed, the demo's wall
time. Goals (docs/learning.md, "Real models"): every node ≥ +10 points over its start and ≥ 2 standard errors
above its solo run on every seed; the demo in ≤ 15 minutes on 2 cores from a warm model cache. What misses is
printed as missed.

``--nois`` runs each seed's swarm a second time with the loss's ``nois`` variant (every sample trained on as if
the node had drawn it: no importance weight, no filter; no solo runs, ``seed-N-nois``) and prints each node's end
under both, their difference in standard errors, and the goal: the weakest node (the lowest end with F-TIS) ends
below its F-TIS run without the importance weights.
"""

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

GAIN_GOAL = 0.10  # accuracy points over the start, each node, every seed
LEAD_GOAL = 2.0  # standard errors of (end − solo end), each node, every seed
WALL_GOAL_S = 15 * 60.0  # the whole demo, solo runs included
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "examples" / "demo-real.toml"
WALL = "wall.json"  # the benchmark's note beside a seed's summary: the demo's wall time


NOIS = {"common": {"loss": {"variant": "nois"}}, "demo": {"solo": False, "run_id": "ftis-real-demo-nois"}}


def seed_settings(config: Path, seed: int, rounds: int | None, path: Path, over: dict[str, Any] | None = None) -> Path:
    """The demo settings of ``config`` with ``[common.model] seed`` (and ``[demo] rounds``, and ``over``) set,
    written to ``path``."""
    from ftis.node.config.base import merged
    from ftis.node.demo.settings import read_toml
    from ftis.node.demo.toml_file import write_toml

    settings = merged(read_toml(config), {"common": {"model": {"seed": seed}}})
    if rounds is not None:
        settings = merged(settings, {"demo": {"rounds": rounds}})
    path.parent.mkdir(parents=True, exist_ok=True)
    write_toml(path, merged(settings, over or {}))
    return path


def run_seed(config: Path, seed: int, rounds: int | None, folder: Path,
             over: dict[str, Any] | None = None) -> dict[str, Any]:
    """One seed's demo (or what an earlier run of it left): its summary and wall time."""
    from ftis.node.demo.run import DemoRequest, run_demo

    summary, wall = folder / "summary.json", folder / WALL
    if not summary.exists():
        settings = seed_settings(config, seed, rounds, folder.parent / f"{folder.name}.toml", over)
        started = time.monotonic()
        result = run_demo(DemoRequest(config=settings, out=folder, view="lines", started=started),
                          echo=lambda line: print(f"[seed {seed}] {line}", flush=True))
        wall.write_text(json.dumps({"seconds": result.seconds}) + "\n", encoding="utf-8")
    seconds = json.loads(wall.read_text(encoding="utf-8"))["seconds"] if wall.exists() else None
    return {"seed": seed, "seconds": seconds, **json.loads(summary.read_text(encoding="utf-8"))}


def node_figures(node: dict[str, Any]) -> dict[str, Any]:
    """What the benchmark reads of one node's row of the demo's summary, and its goals."""
    gain, lead = node["change"], node["ahead_of_solo_errors"]
    return {
        "name": node["name"], "model": f"{node['model']} ({node['adapter']})",
        "start": (node["start_accuracy"], node["start_error"]), "end": (node["end_accuracy"], node["end_error"]),
        "solo_end": (node["solo_end_accuracy"], node["solo_end_error"]), "gain": gain,
        "ahead_of_solo": node["ahead_of_solo"], "lead_errors": lead,
        "gain_met": gain is not None and gain >= GAIN_GOAL, "lead_met": lead is not None and lead >= LEAD_GOAL,
    }


def _value(pair: tuple[float | None, float | None]) -> str:
    value, error = pair
    if value is None:
        return "-"
    return f"{100 * value:.1f}%" + ("" if error is None else f" ± {100 * error:.1f}")


def report(runs: list[dict[str, Any]]) -> str:
    lines = ["| seed | node | start | end | solo end | gain (goal ≥ +10) | end − solo (goal ≥ 2 SE) | wall |",
             "|---|---|---|---|---|---|---|---|"]
    for run in runs:
        wall = "-" if run["seconds"] is None else f"{run['seconds'] / 60:.1f} min" + (
            "" if run["seconds"] <= WALL_GOAL_S else " (over 15)")
        for node in map(node_figures, run["nodes"]):
            gain = "-" if node["gain"] is None else f"{100 * node['gain']:+.1f}" + ("" if node["gain_met"] else " ✗")
            lead = "-" if node["ahead_of_solo"] is None else (
                f"{100 * node['ahead_of_solo']:+.1f} ({node['lead_errors']:.1f} SE)"
                + ("" if node["lead_met"] else " ✗"))
            lines.append(f"| {run['seed']} | {node['name']} ({node['model']}) | {_value(node['start'])} | "
                         f"{_value(node['end'])} | {_value(node['solo_end'])} | {gain} | {lead} | {wall} |")
            wall = ""
    lines += ["", "over seeds (mean ± standard error of the mean):"]
    names = [node["name"] for node in runs[0]["nodes"]] if runs else []
    for name in names:
        rows = [node_figures(node) for run in runs for node in run["nodes"] if node["name"] == name]
        gains = [row["gain"] for row in rows if row["gain"] is not None]
        leads = [row["ahead_of_solo"] for row in rows if row["ahead_of_solo"] is not None]
        lines.append(f"  {name}: gain {_mean_error(gains)} points, end − solo {_mean_error(leads)} points; goals met "
                     f"on {sum(row['gain_met'] for row in rows)}/{len(rows)} seeds (gain), "
                     f"{sum(row['lead_met'] for row in rows)}/{len(rows)} (lead)")
    walls = [run["seconds"] for run in runs if run["seconds"] is not None]
    if walls:
        lines.append(f"  wall time {min(walls) / 60:.1f}–{max(walls) / 60:.1f} min (goal ≤ 15): "
                     f"{sum(wall <= WALL_GOAL_S for wall in walls)}/{len(walls)} seeds within it")
    return "\n".join(lines)


def nois_report(runs: list[dict[str, Any]], nois_runs: list[dict[str, Any]]) -> str:
    """Each node's end with F-TIS and with ``nois`` (same seed), and the goal for the weakest node."""
    lines = ["| seed | node | end, ftis | end, nois | ftis − nois |", "|---|---|---|---|---|"]
    weakest_below = []
    for run, nois in zip(runs, nois_runs, strict=True):
        ends = {node["name"]: node for node in nois["nodes"]}
        swarm_ends = [(node["end_accuracy"], node["name"]) for node in run["nodes"] if node["end_accuracy"] is not None]
        weakest = min(swarm_ends)[1] if swarm_ends else None
        for node in run["nodes"]:
            other = ends.get(node["name"])
            if other is None or node["end_accuracy"] is None or other["end_accuracy"] is None:
                continue
            lead = node["end_accuracy"] - other["end_accuracy"]
            error = (node["end_error"] ** 2 + other["end_error"] ** 2) ** 0.5
            mark = ""
            if node["name"] == weakest:
                weakest_below.append(lead > 0)
                mark = " (weakest" + ("" if lead > 0 else ": ✗") + ")"
            end, nois_end = (node["end_accuracy"], node["end_error"]), (other["end_accuracy"], other["end_error"])
            lines.append(f"| {run['seed']} | {node['name']}{mark} | {_value(end)} | {_value(nois_end)} | "
                         f"{100 * lead:+.1f} ({lead / error if error else 0.0:.1f} SE) |")
    lines.append(f"  the weakest node (lowest end with F-TIS) below F-TIS without importance weights: "
                 f"{sum(weakest_below)}/{len(weakest_below)} seeds")
    return "\n".join(lines)


def _mean_error(values: list[float]) -> str:
    if not values:
        return "-"
    mean = 100 * statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:+.1f}"
    return f"{mean:+.1f} ± {100 * statistics.stdev(values) / len(values) ** 0.5:.1f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG,
                        help="the demo settings (default: the real demo)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("runs") / "real-demo")
    parser.add_argument("--rounds", type=int, default=None, help="override [demo] rounds")
    parser.add_argument("--nois", action="store_true",
                        help="also run each seed's swarm with the nois loss variant and compare the ends")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    runs: list[dict[str, Any]] = []
    nois_runs: list[dict[str, Any]] = []
    for seed in args.seeds:
        runs.append(run_seed(args.config, seed, args.rounds, args.out / f"seed-{seed}"))
        print(report(runs), flush=True)
        if args.nois:
            nois_runs.append(run_seed(args.config, seed, args.rounds, args.out / f"seed-{seed}-nois", NOIS))
            print(nois_report(runs, nois_runs), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"ftis": runs, "nois": nois_runs}, indent=2) + "\n", encoding="utf-8")
    print(f"command: python -m benchmarks.real_demo --config {args.config} --seeds {' '.join(map(str, args.seeds))} "
          f"--out {args.out}{' --nois' if args.nois else ''}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


if __name__ == "__main__":
    from ftis.node.signals import exit_on_sigterm

    exit_on_sigterm()  # as `ftis-node demo`: SIGTERM or Ctrl-C stops the demo's processes before the benchmark ends
    main()
