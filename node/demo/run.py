"""``ftis-node demo``: a heterogeneous swarm on this machine, from nothing to a summary and a plot.

    run_demo(DemoRequest(), echo=print)  # what the command calls; see docs/demo.md

In order:
1. warm-up, before any node starts: each distinct ``[model.warmup]`` recipe of the nodes is trained once
   (or found in the cache, whose folder is printed), several side by side in worker processes when the
   machine has the cores, so the nodes, which ask the same cache, only load it;
2. ``ftis-node bootstrap`` on 127.0.0.1, then one ``ftis-node join`` per node with its own config file
   in its own folder, torch threads capped per process (and, when asked, ``ftis-node dashboard`` on them);
3. while they train, the nodes' ``metrics.jsonl`` files are followed and shown (``view.py``); a node or
   the bootstrap that dies stops the demo, which names it and shows the end of its log;
4. with the solo baseline, each node again, alone in a run of its own, same warm start, seed and rounds;
5. the summary (terminal, ``summary.md``, ``summary.json``) and ``accuracy.png`` in the demo's folder.

Every process it started is stopped when it ends, however it ends (``children.py``).
"""

import multiprocessing
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ftis.node.config import NodeConfig
from ftis.node.demo.children import Child, Children
from ftis.node.demo.follow import MetricsFollower, NodeProgress, with_start_of
from ftis.node.demo.launch import (
    NODE_LOG,
    DemoError,
    bootstrap_args,
    child_env,
    dashboard_args,
    join_args,
    wait_for_maddr,
    wait_for_url,
    write_node_config,
)
from ftis.node.demo.settings import DemoConfig, load_demo_config
from ftis.node.demo.summary import as_json, headline, markdown, rich_table, summarize
from ftis.node.demo.view import View, make_view
from ftis.node.records.record_kinds import is_step

POLL_S = 0.5  # how often the metrics files and the processes are looked at
SOLO = "solo"  # the solo baseline's folder inside the demo's


@dataclass(frozen=True)
class DemoRequest:
    config: Path | None = None  # None: the packaged config.toml
    out: Path | None = None  # None: runs/demo/<date-time>
    rounds: int | None = None  # overrides [demo] rounds
    solo: bool | None = None  # overrides [demo] solo
    view: str = "auto"  # auto | table | lines
    dashboard: bool = False  # also serve ftis-node dashboard on the swarm and its node folders
    started: float | None = None  # time.monotonic() when the command started (the wall time printed counts from it)


@dataclass(frozen=True)
class DemoResult:
    out: Path
    summary: Path
    plot: Path
    seconds: float


def run_demo(request: DemoRequest, echo: Callable[[str], None]) -> DemoResult:
    """Run the demo; ``ConfigError`` for bad settings, ``DemoError`` when a process fails or the folder
    is taken. Ctrl-C and SIGTERM propagate after every child has been stopped."""
    started = time.monotonic() if request.started is None else request.started
    config = _with_overrides(load_demo_config(request.config), request)
    out = request.out or Path("runs") / "demo" / time.strftime("%Y%m%d-%H%M%S")
    if out.exists() and any(out.iterdir()):
        raise DemoError(f"{out} is not empty: give the demo a new folder (--out)")
    out.mkdir(parents=True, exist_ok=True)
    nodes = config.node_configs()
    settings = config.node_settings()
    echo(f"ftis-node demo: {len(nodes)} nodes, {config.demo.rounds} rounds each; everything goes into {out}")
    warm_up(nodes, config.demo.threads_per_node, echo)
    warmed = time.monotonic()
    children = Children(config.demo.stop_timeout_s, echo)
    view = make_view(request.view, config.demo.rounds, echo)
    solo: dict[str, NodeProgress] = {}
    try:
        bootstrap = children.start("bootstrap", bootstrap_args(config.demo.run_id), out / "bootstrap.log",
                                   child_env(config.demo.threads_per_node))
        maddr = wait_for_maddr(bootstrap, config.demo.start_timeout_s)
        echo(f"bootstrap peer up (pid {bootstrap.pid}): {maddr}")
        phase = _swarm_phase(out, settings, config.demo.run_id, maddr)
        if request.dashboard:
            dashboard = children.start("dashboard", dashboard_args(config.demo.run_id, maddr,
                                                                   list(phase.folders.values())),
                                       out / "dashboard.log", child_env(config.demo.threads_per_node))
            url = wait_for_url(dashboard, config.demo.start_timeout_s)
            view.note(f"dashboard (pid {dashboard.pid}): {url} (open it in a browser; it stops with the demo)")
        swarm = _run_nodes(config, nodes, phase, children, view, bootstrap)
        swarm_done = time.monotonic()
        if config.demo.solo:
            view.note(f"solo baseline: each node alone, on-policy, {config.demo.rounds} rounds")
            solo = _run_nodes(config, nodes, _solo_phase(out, settings, config.demo.run_id, maddr), children, view,
                              bootstrap)
    finally:
        view.close()
        _stop_shielded(children)
    finished = time.monotonic()
    result = _report(out, list(swarm.values()), solo, config.demo.solo, finished - started, echo)
    echo(f"wall time {finished - started:.0f} s: warm-up {warmed - started:.0f} s, swarm {swarm_done - warmed:.0f} s"
         + (f", solo baseline {finished - swarm_done:.0f} s" if config.demo.solo else ""))
    if request.dashboard:  # it stopped with the demo; the folders stay
        echo("the dashboard again, on the nodes' folders: " + shlex.join(
            ["ftis-node", "dashboard", *(part for name in settings for part in ("--node", str(out / name)))]))
    return result


def _with_overrides(config: DemoConfig, request: DemoRequest) -> DemoConfig:
    changes = {key: value for key, value in (("rounds", request.rounds), ("solo", request.solo)) if value is not None}
    return replace_demo(config, **changes) if changes else config


def replace_demo(config: DemoConfig, **changes: object) -> DemoConfig:
    """``config`` with ``[demo]`` settings changed (validated again)."""
    return DemoConfig.model_validate({**config.model_dump(), "demo": {**config.demo.model_dump(), **changes}})


def warm_up(nodes: Mapping[str, NodeConfig], threads: int, echo: Callable[[str], None]) -> None:
    """Train (or find in the cache) every distinct warm start the nodes ask for, once each, on ``threads``
    torch threads each (tiny models gain nothing from more, and lose much when other work shares the cores).
    Two or more to train run side by side, one process each, as many at once as the machine has cores."""
    recipes = {name: config for name, config in nodes.items() if config.model.warmup.steps}
    if not recipes:
        return
    from ftis.node.warmup import cache_key, cache_root, is_cached, warmup_spec

    distinct: dict[tuple[Path, str], tuple[str, NodeConfig]] = {}
    for name, config in recipes.items():
        root = cache_root(config.model.warmup.cache_dir)
        key = (root, cache_key(warmup_spec(config.model, config.task)))
        if key in distinct:
            echo(f"warm start of {name}: the same as {distinct[key][0]}'s")
            continue
        distinct[key] = (name, config)
        echo(f"warm start of {name} ({config.model.name}), cache {root}")
    to_train = [(name, config) for (root, key), (name, config) in distinct.items() if not is_cached(root, key)]
    workers = min(len(to_train), os.cpu_count() or 1)
    if workers < 2:  # nothing, or one, to train: here
        for name, config in distinct.values():
            _warm_start(name, config, threads, echo)
        return
    echo(f"training {len(to_train)} warm starts, {workers} at a time")
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for done in [pool.submit(_warm_start, name, config, threads) for name, config in to_train]:
            done.result()  # a failed warm-up raises here, after the others finish
    for name, config in distinct.values():  # every node's warm start, now from the cache: its line
        _warm_start(name, config, threads, echo)


def _warm_start(name: str, config: NodeConfig, threads: int, echo: Callable[[str], None] | None = None) -> None:
    """One warm start, here or in a worker process (whose lines, prefixed with the node, go to its stdout)."""
    import torch

    from ftis.node.warmup import warm_start, warmup_spec

    torch.set_num_threads(threads)
    say = echo if echo is not None else lambda line: print(f"{name}: {line}", flush=True)
    warm_start(warmup_spec(config.model, config.task), config.model.warmup.cache_dir, say)


@dataclass(frozen=True)
class _Phase:
    """One set of node processes: the swarm, or the solo baseline."""

    peer: str  # the bootstrap's address
    labels: dict[str, str]  # node name -> the name the view shows
    folders: dict[str, Path]
    configs: dict[str, Path]  # each node's config file


def _swarm_phase(out: Path, settings: Mapping[str, dict], run_id: str, maddr: str) -> _Phase:
    folders = {name: out / name for name in settings}
    return _Phase(maddr, {name: name for name in settings}, folders,
                  {name: write_node_config(folders[name], settings[name], run_id, maddr) for name in settings})


def _solo_phase(out: Path, settings: Mapping[str, dict], run_id: str, maddr: str) -> _Phase:
    """Each node alone: a run id of its own (it sees no peer), and no waiting for peers. It starts from the model its
    swarm twin started from, whose first evaluation is its own (``_report``): it does not evaluate it again."""
    folders = {name: out / SOLO / name for name in settings}
    over = {"loop": {"mode": "async", "min_peers": 0}, "eval": {"at_start": False}}
    return _Phase(maddr, {name: f"{name}-solo" for name in settings}, folders,
                  {name: write_node_config(folders[name], settings[name], f"{run_id}-solo-{name}", maddr, over)
                   for name in settings})


def _run_nodes(config: DemoConfig, nodes: Mapping[str, NodeConfig], phase: _Phase, children: Children, view: View,
               bootstrap: Child) -> dict[str, NodeProgress]:
    """Start one ``ftis-node join`` per node, follow them until every one has finished its rounds."""
    env = child_env(config.demo.threads_per_node)
    started = {}
    for name in nodes:
        label, folder = phase.labels[name], phase.folders[name]
        started[name] = children.start(label, join_args(phase.configs[name], phase.peer, folder, config.demo.rounds),
                                       folder / NODE_LOG, env)
        view.note(f"{label}: {nodes[name].model.name} ({nodes[name].model.adapter}), pid {started[name].pid}, "
                  f"folder {folder}")
    progress = {name: NodeProgress(phase.labels[name], nodes[name].model.name, nodes[name].model.adapter)
                for name in nodes}
    followers = {name: MetricsFollower(phase.folders[name] / "metrics.jsonl") for name in nodes}
    while True:
        ended = {name: child.exit_status() for name, child in started.items()}
        new = []
        for name, follower in followers.items():
            for record in follower.read_new():
                progress[name].add(record)
                if is_step(record):
                    new.append((phase.labels[name], record))
        view.show(list(progress.values()), new)
        for name, status in ended.items():
            if status not in (None, 0):
                child = started[name]
                raise DemoError(f"node {phase.labels[name]} (pid {child.pid}) exited with status {status}; the end "
                                f"of {child.log}:\n{child.log_tail()}")
        if all(status == 0 for status in ended.values()):
            return progress
        if bootstrap.exit_status() is not None:
            raise DemoError(f"the bootstrap peer (pid {bootstrap.pid}) exited with status {bootstrap.exit_status()}; "
                            f"the end of {bootstrap.log}:\n{bootstrap.log_tail()}")
        time.sleep(POLL_S)


def _stop_shielded(children: Children) -> None:
    """Stop every child with Ctrl-C and SIGTERM held off: a second Ctrl-C must not leave orphans behind.
    Stopping is bounded (``stop_timeout_s``, then SIGKILL)."""
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        children.stop_all()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _report(out: Path, swarm: list[NodeProgress], solo: Mapping[str, NodeProgress], solo_ran: bool,
            seconds: float, echo: Callable[[str], None]) -> DemoResult:
    import json

    from ftis.node.demo.plot import plot_accuracy

    solo = {node.name: with_start_of(solo[node.name], node) for node in swarm if node.name in solo}
    rows = [summarize(node, solo.get(node.name)) for node in swarm]
    text = headline(rows, solo_ran) + "\n\n" + markdown(rows, solo_ran)
    if sys.stdout.isatty():
        from rich.console import Console

        echo(headline(rows, solo_ran))
        Console().print(rich_table(rows, solo_ran))
    else:
        echo(text)
    summary = out / "summary.md"
    summary.write_text(text, encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(as_json(rows, solo_ran), indent=2) + "\n", encoding="utf-8")
    plot = plot_accuracy(out / "accuracy.png", swarm, solo)
    echo(f"summary: {summary} (and summary.json); plot: {plot}")
    return DemoResult(out, summary, plot, seconds)
