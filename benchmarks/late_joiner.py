"""A newcomer in a swarm that has trained without it: how soon it trains on its peers' groups, what it holds in
memory, and how fast it learns against the same model alone.

    python -m benchmarks.late_joiner [--config DEMO.toml] [--joiner NAME] [--after N] [--rounds R] [--out DIR]
                                     [--report]

From a demo settings file (default: the packaged tiny demo, ``node/demo/config.toml``; ``examples/demo-real.toml``
for the real models, after ``ftis-node models fetch --all``), exactly as a user runs the nodes (``ftis-node
bootstrap`` and one ``ftis-node join`` process each, over real hivemind on 127.0.0.1, ``node/demo/launch.py``):

1. every node but the joiner (default: the file's last node) starts together, from its warm start, and trains;
2. once each has trained ``--after`` rounds, the joiner starts from its own start (its warm start, or the published
   model), *cold*: the page cache dropped first where this process may (root), so its model and Python's modules
   come from disk; it trains ``--rounds`` rounds beside them, evaluated at its first round and every ``[eval]
   every`` rounds;
3. a second joiner with the same settings, *warm* (its files in the page cache), once the first has finished:
   2 rounds;
4. the joiner alone from the same start, ``--rounds`` rounds (its solo run), the others stopped.

It prints, for each joiner, the seconds from its ``join`` command to its first step that trained on a peer's
group, split at the moment the node said it was on the swarm (model loaded, DHT joined: the ``node <id> (...)
in run`` line), and its peak resident memory (the node's Python process; ``p2pd`` apart); then the cold
joiner's accuracy curve beside its solo run's, by rounds trained, and how many rounds each took to reach the solo
run's final accuracy. ``DIR/late_joiner.json`` keeps every figure. Goals (2 cores, real models): first step
with a peer's group within 180 s cold and 30 s warm, RSS at most 4 GB, the solo run's final accuracy in fewer
rounds than alone.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from ftis.node.demo.children import Child, Children
from ftis.node.demo.launch import (
    NODE_LOG,
    DemoError,
    bootstrap_args,
    child_env,
    join_args,
    wait_for_maddr,
    write_node_config,
)
from ftis.node.demo.run import warm_up
from ftis.node.demo.settings import load_demo_config
from ftis.node.records.record_kinds import is_step

POLL_S = 0.1
ON_SWARM = " in run "  # the node's line once its model is loaded and it is on the swarm (runner/join.py)
WARM_ROUNDS = 2
SOLO_RUN_SUFFIX = "-solo-joiner"


@dataclass
class Joining:
    """One joiner's way in: seconds from its ``join`` command, and its peak memory."""

    label: str
    cache_dropped: bool
    on_swarm_s: float | None = None  # the node's line: model loaded, DHT joined
    first_step_s: float | None = None
    first_received_s: float | None = None  # its first step with a peer's group received (trained on or not)
    first_used_s: float | None = None  # ...and with a peer's group trained on
    first_round: int | None = None  # the round it started at: the swarm's
    swarm_round: int | None = None  # the others' newest round when it started
    eval_s: float = 0.0  # of first_step_s: the evaluation at its first round (a benchmark's, not a user's default)
    peak_rss_mb: float = 0.0  # the node's Python process
    peak_p2pd_rss_mb: float = 0.0


@dataclass
class Curve:
    """Greedy accuracy by rounds trained: (rounds, accuracy, standard error)."""

    points: list[tuple[int, float, float]] = field(default_factory=list)

    @property
    def final(self) -> tuple[int, float, float] | None:
        return self.points[-1] if self.points else None


def rounds_to_reach(curve: Curve, target: float) -> int | None:
    """The rounds trained at the first evaluation at or above ``target`` (None: never)."""
    return next((rounds for rounds, accuracy, _ in curve.points if accuracy >= target), None)


def curve_of(records: list[dict[str, Any]]) -> Curve:
    """A node's evaluations by rounds trained: the steps written before each (a node that jumps to the swarm's
    round numbers its rounds as the swarm does; what it has trained is its own count)."""
    curve, steps = Curve(), 0
    for record in records:
        if is_step(record):
            steps += 1
        elif "eval_accuracy" in record and "eval_total" in record:
            curve.points.append((steps, record["eval_accuracy"], record["eval_standard_error"]))
    return curve


def read_records(folder: Path) -> list[dict[str, Any]]:
    path = folder / "metrics.jsonl"
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            break
    return records


def drop_page_cache() -> bool:
    """Drop the clean page cache (Linux, root): what a process reads next comes from disk. False where it may not."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("1\n")
    except OSError:
        return False
    return True


def _rss_mb(process: psutil.Process) -> tuple[float, float]:
    """The process's resident memory, and its ``p2pd`` descendants', in MB."""
    try:
        own = process.memory_info().rss
        daemons = sum(child.memory_info().rss for child in process.children(recursive=True)
                      if "p2pd" in child.name())
    except psutil.Error:
        return 0.0, 0.0
    return own / 1e6, daemons / 1e6


def follow_joiner(child: Child, folder: Path, joining: Joining, started: float, others: list[Path],
                  until_steps: int, timeout_s: float) -> None:
    """Watch a joiner until it has written ``until_steps`` step records (or exited): its milestones and memory."""
    process = psutil.Process(child.pid)
    joining.swarm_round = max((r["round"] for folder_ in others for r in read_records(folder_) if is_step(r)),
                              default=None)
    deadline = time.monotonic() + timeout_s
    wall0 = time.time() - (time.monotonic() - started)  # the epoch time of the command's start
    while time.monotonic() < deadline:
        own, daemons = _rss_mb(process)
        joining.peak_rss_mb = max(joining.peak_rss_mb, own)
        joining.peak_p2pd_rss_mb = max(joining.peak_p2pd_rss_mb, daemons)
        if joining.on_swarm_s is None and ON_SWARM in child.log.read_text(encoding="utf-8", errors="replace"):
            joining.on_swarm_s = time.monotonic() - started
        records = read_records(folder)
        steps = [r for r in records if is_step(r)]
        joining.eval_s = first_evaluation_seconds(records)
        for record in steps:
            if joining.first_step_s is None:
                joining.first_step_s, joining.first_round = record["time"] - wall0, record["round"]
            if joining.first_received_s is None and record["peer_groups_received"] > 0:
                joining.first_received_s = record["time"] - wall0
            if joining.first_used_s is None and record["peer_groups_used"] > 0:
                joining.first_used_s = record["time"] - wall0
        if len(steps) >= until_steps or child.exit_status() is not None:
            return
        time.sleep(POLL_S)
    raise DemoError(f"{joining.label} did not write {until_steps} steps within {timeout_s:.0f} s; the end of "
                    f"{child.log}:\n{child.log_tail()}")


def first_evaluation_seconds(records: list[dict[str, Any]]) -> float:
    """Seconds the node evaluated before its first step (its evaluation at the start, when it has one)."""
    seconds = 0.0
    for record in records:
        if is_step(record):
            break
        seconds += record.get("eval_seconds", 0.0)
    return seconds


def wait_rounds(folders: dict[str, Path], children: dict[str, Child], rounds: int, timeout_s: float) -> None:
    """Until every node in ``folders`` has written ``rounds`` step records."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for name, child in children.items():
            if child.exit_status() is not None:
                raise DemoError(f"{name} exited with status {child.exit_status()}; the end of {child.log}:\n"
                                f"{child.log_tail()}")
        if all(sum(is_step(r) for r in read_records(folder)) >= rounds for folder in folders.values()):
            return
        time.sleep(1.0)
    raise DemoError(f"the swarm did not train {rounds} rounds within {timeout_s:.0f} s")


def run(config_path: Path | None, joiner: str | None, after: int, rounds: int, out: Path,
        echo=print) -> dict[str, Any]:
    config = load_demo_config(config_path)
    nodes, settings = config.node_configs(), config.node_settings()
    joiner = joiner or list(nodes)[-1]
    if joiner not in nodes or len(nodes) < 2:
        raise SystemExit(f"--joiner {joiner}: the file's nodes are {', '.join(nodes)} (two at least)")
    others = [name for name in nodes if name != joiner]
    run_id, threads = config.demo.run_id + "-late", config.demo.threads_per_node
    env = child_env(threads)
    out.mkdir(parents=True, exist_ok=True)
    warm_up(nodes, threads, echo)
    children = Children(config.demo.stop_timeout_s, echo)
    result: dict[str, Any] = {"config": str(config_path or "node/demo/config.toml"), "joiner": joiner,
                              "others": others, "after": after, "rounds": rounds, "cpus": os.cpu_count()}
    try:
        bootstrap = children.start("bootstrap", bootstrap_args(run_id), out / "bootstrap.log", env)
        maddr = wait_for_maddr(bootstrap, config.demo.start_timeout_s)
        loop = dict(settings[others[0]].get("loop", {}))
        swarm_folders = {name: out / name for name in others}
        swarm = {}
        for name in others:
            path = write_node_config(swarm_folders[name], settings[name], run_id, maddr,
                                     over={"loop": {**loop, "min_peers": len(others) - 1}})
            endless = after + 10 * (rounds + WARM_ROUNDS) + 100  # stopped once the joiners are done
            swarm[name] = children.start(name, join_args(path, maddr, swarm_folders[name], endless),
                                         swarm_folders[name] / NODE_LOG, env)
        echo(f"late joiner: {', '.join(others)} train {after} rounds; then {joiner} joins for {rounds} rounds")
        wait_rounds(swarm_folders, swarm, after, timeout_s=3600)
        joinings = []
        for label, steps, drop in (("cold", rounds, True), ("warm", WARM_ROUNDS, False)):
            folder = out / f"{joiner}-{label}"
            path = write_node_config(folder, settings[joiner], run_id, maddr,
                                     over={"loop": {**loop, "min_peers": len(others)}})
            joining = Joining(label, cache_dropped=drop and drop_page_cache())
            started = time.monotonic()
            child = children.start(f"{joiner}-{label}", join_args(path, maddr, folder, steps), folder / NODE_LOG, env)
            follow_joiner(child, folder, joining, started, list(swarm_folders.values()), steps, timeout_s=3600)
            child.process.wait(timeout=600)
            joinings.append(joining)
            echo(line_of(joining))
        children.stop([swarm[name] for name in others])
        result["joinings"] = [asdict(joining) for joining in joinings]
        solo_folder = out / f"{joiner}-solo"
        path = write_node_config(solo_folder, settings[joiner], run_id + SOLO_RUN_SUFFIX, maddr,
                                 over={"loop": {"mode": "async", "min_peers": 0}})
        echo(f"{joiner} alone, {rounds} rounds")
        solo = children.start(f"{joiner}-solo", join_args(path, maddr, solo_folder, rounds), solo_folder / NODE_LOG,
                              env)
        if solo.process.wait() != 0:
            raise DemoError(f"the solo run exited with status {solo.exit_status()}:\n{solo.log_tail()}")
    finally:
        children.stop_all()
    joined, alone = curve_of(read_records(out / f"{joiner}-cold")), curve_of(read_records(out / f"{joiner}-solo"))
    result.update(joined=joined.points, alone=alone.points)
    if alone.final is not None:
        target = alone.final[1]
        result.update(solo_final=target, joined_reaches_in=rounds_to_reach(joined, target),
                      alone_reaches_in=rounds_to_reach(alone, target))
    (out / "late_joiner.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return result


def line_of(joining: Joining) -> str:
    def s(value: float | None) -> str:
        return "never" if value is None else f"{value:.1f} s"

    cache = "page cache dropped" if joining.cache_dropped else "page cache as it was"
    return (f"{joining.label} ({cache}): on the swarm {s(joining.on_swarm_s)}, first step {s(joining.first_step_s)} "
            f"(evaluating {joining.eval_s:.1f} s of it) "
            f"(round {joining.first_round}; the others were at {joining.swarm_round} when it started), a peer's group "
            f"received {s(joining.first_received_s)}, trained on {s(joining.first_used_s)}; peak RSS "
            f"{joining.peak_rss_mb:.0f} MB (p2pd {joining.peak_p2pd_rss_mb:.0f} MB)")


def report(result: dict[str, Any], out: Path) -> str:
    """The printed figures of ``result``, what ``out`` holds read again where the result predates a figure."""
    joinings = [Joining(**joining) for joining in result["joinings"]]
    for joining in joinings:
        joining.eval_s = first_evaluation_seconds(read_records(out / f"{result['joiner']}-{joining.label}"))
    lines = [line_of(joining) for joining in joinings]
    lines.append("rounds trained | joined late: accuracy (SE) | alone: accuracy (SE)")
    joined = {rounds: (accuracy, se) for rounds, accuracy, se in result["joined"]}
    alone = {rounds: (accuracy, se) for rounds, accuracy, se in result["alone"]}

    def cell(point: tuple[float, float] | None) -> str:
        return f"{'':>14}" if point is None else f"{point[0]:6.1%} ({point[1]:.1%})".rjust(14)

    for rounds in sorted(joined.keys() | alone.keys()):
        lines.append(f"{rounds:>14} | {cell(joined.get(rounds))} | {cell(alone.get(rounds))}")
    if "solo_final" in result:
        lines.append(f"the solo run's final accuracy {result['solo_final']:.1%}: reached after "
                     f"{result['joined_reaches_in']} rounds joined late, {result['alone_reaches_in']} alone")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=None, help="a demo settings file (default: the tiny demo's)")
    parser.add_argument("--joiner", default=None, help="the node that joins late (default: the file's last)")
    parser.add_argument("--after", type=int, default=50, help="rounds the others train before it joins")
    parser.add_argument("--rounds", type=int, default=100, help="rounds the joiner trains (and its solo run)")
    parser.add_argument("--out", type=Path, default=Path("runs") / "late-joiner" / time.strftime("%Y%m%d-%H%M%S"))
    parser.add_argument("--report", action="store_true", help="the report of DIR/late_joiner.json; run nothing")
    args = parser.parse_args()
    if args.report:
        print(report(json.loads((args.out / "late_joiner.json").read_text(encoding="utf-8")), args.out))
        return
    started = time.monotonic()
    result = run(args.config, args.joiner, args.after, args.rounds, args.out)
    print(report(result, args.out))
    load = os.getloadavg()[0]
    print(f"{time.monotonic() - started:.0f} s, load average {load:.1f} at the end; {args.out / 'late_joiner.json'}")
    print("command: " + subprocess.list2cmdline(["python", "-m", "benchmarks.late_joiner", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
