"""Node utilisation in the demo swarm: the share of each node's wall time spent generating or training
(goal ≥ 95%), and what takes the rest.

Run (from the repo root):  python -m benchmarks.utilisation [--rounds N] [--mode rounds|async] [--out DIR] [--quick]
--rounds: rounds per node (default the demo's 100); --mode: the demo's ``rounds`` (lockstep: each round waits
for the other nodes' batches) or ``async`` (never waits, trains on what has arrived); --quick: 12 rounds.

Method: ``ftis-node demo`` itself, without its solo baseline (``run_demo``: warm starts from the cache, a
bootstrap and three ``ftis-node join`` processes over real hivemind on 127.0.0.1, the packaged
``node/demo/config.toml``; with ``--mode async`` the same file with ``[common.loop] mode = "async"``). Each
node's run loop measures every round's share of its wall time and what took it (``node/records/utilisation.py``;
the laps tile the loop, so the parts add up to the wall time) and writes it into its ``metrics.jsonl``; this
script reads those records when the demo ends. Round 0 is left out: its lap holds the node's first evaluation
and, in rounds mode, the wait for the other processes to start up.

Printed per node and for the swarm (mean over nodes): utilisation = (generate + train) / wall time; the same
with periodic evaluation and checkpoints taken out of the wall time (real work the user asked for, but neither
generating nor training); and the mean milliseconds per round of every part.

Reading it: three nodes share this machine's cores, so while one computes the others are slower; CPU contention
shows up as slower generation and training (more utilised seconds), not as lost utilisation. In rounds mode a
node waits (``collect``) until the slowest node's batch of the round has arrived: the fast nodes idle by design,
and the slowest node's figure is the one that sets the swarm's pace.
"""

import argparse
import os
import platform
import shutil
import tempfile
import time
import tomllib
from importlib import resources
from pathlib import Path

from benchmarks.swarm_common import print_table
from ftis.node.demo.follow import read_progress
from ftis.node.demo.launch import DemoError
from ftis.node.demo.run import DemoRequest, run_demo
from ftis.node.demo.toml_file import write_toml
from ftis.node.records.utilisation import PARTS, LoopLap, laps_of, work_share

SETUP = ("eval", "checkpoint")  # taken out of the wall time for the second figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--mode", choices=("rounds", "async"), default="rounds")
    parser.add_argument("--out", type=Path, default=None, help="keep the demo's folder here (default: a temporary one)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rounds = args.rounds or (12 if args.quick else 100)

    scratch = None if args.out else Path(tempfile.mkdtemp(prefix="ftis-utilisation-"))
    out = args.out or scratch
    try:
        print(f"{time.strftime('%Y-%m-%d %H:%M')}  {platform.node()}: {os.cpu_count()} cores, load average "
              f"{_load()} at start")
        print(f"demo swarm, {args.mode} mode, {rounds} rounds per node; its log: {out / 'demo.log'}")
        started = time.monotonic()
        try:
            demo = run_swarm(out, rounds, args.mode)
        except DemoError as error:
            raise SystemExit(f"the demo failed: {error}") from None
        print(f"ran in {time.monotonic() - started:.0f} s; load average {_load()} at the end")
        report(demo)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def run_swarm(out: Path, rounds: int, mode: str) -> Path:
    """Run the demo (no solo baseline) into ``out/demo``; its folder."""
    out.mkdir(parents=True, exist_ok=True)
    settings = tomllib.loads(resources.files("ftis.node.demo").joinpath("config.toml").read_text("utf-8"))
    settings["common"]["loop"]["mode"] = mode
    config = out / "demo.toml"
    write_toml(config, settings)
    demo = out / "demo"
    with (out / "demo.log").open("w", encoding="utf-8") as log:
        def echo(line: str) -> None:
            log.write(line + "\n")
            log.flush()

        run_demo(DemoRequest(config=config, out=demo, rounds=rounds, solo=False, view="lines"), echo)
    return demo


def report(demo: Path) -> None:
    nodes = {folder.name: node_laps(folder / "metrics.jsonl") for folder in sorted(demo.iterdir())
             if (folder / "metrics.jsonl").exists()}
    columns = [name for name in PARTS if any(lap.parts[name] for laps in nodes.values() for lap in laps)]
    rows = [("node", "rounds", "utilisation", "without eval+ckpt", "ms/round", *columns)]
    for name, laps in nodes.items():
        rows.append(_row(name, laps, columns))
    rows.append(_row("swarm mean", [lap for laps in nodes.values() for lap in laps], columns,
                     per_node=list(nodes.values())))
    print("\nmilliseconds per round (mean over the rounds after round 0); utilisation = (generate + train) / wall")
    print_table(rows)


def node_laps(path: Path) -> list[LoopLap]:
    return laps_of(read_progress(path, path.parent.name, "", "").steps[1:])


def _row(name: str, laps: list[LoopLap], columns: list[str], per_node: list[list[LoopLap]] | None = None) -> tuple:
    """A node's row; the swarm's (``per_node``) averages the nodes' utilisations, each node weighing the same."""
    groups = per_node or [laps]
    util = sum(work_share(group) for group in groups) / len(groups)
    util_work = sum(work_share(group, excluding=SETUP) for group in groups) / len(groups)
    n = len(laps)
    mean_ms = {part: 1000 * sum(lap.parts[part] for lap in laps) / n for part in columns}
    rounds = str(n) if per_node is None else "-"
    return (name, rounds, f"{util:.1%}", f"{util_work:.1%}", f"{1000 * sum(lap.seconds for lap in laps) / n:.0f}",
            *(f"{mean_ms[part]:.0f}" for part in columns))


def _load() -> str:
    return "/".join(f"{value:.1f}" for value in os.getloadavg())


if __name__ == "__main__":
    main()
