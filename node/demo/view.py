"""The demo's terminal while its nodes train: one row per node, from the records the nodes write.

Two views behind one interface (``show(nodes, new)`` after each look at the metrics files, ``note(line)``
for a message, ``close()``):
- ``TableView``: a live rich table, a row per node, redrawn in place (on a terminal);
- ``LinesView``: one line per node step as it arrives (logs, pipes, CI).

``make_view("auto" | "table" | "lines", rounds, echo)``: ``auto`` draws the table only on a terminal.
"""

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from rich import box
from rich.console import Console
from rich.live import Live
from rich.table import Table

from ftis.node.demo.follow import NodeProgress
from ftis.node.records.display import fixed, percent, size

# Under each header: "acc" is a mean binary reward; eval is greedy accuracy on the fixed held-out set
# (with the round it was measured at); groups are own / peers' used this step; filtered and IS weight
# are this step's; traffic is since the node started.
COLUMNS = ("node", "model", "round", "reward\nown", "reward\npeer", "eval acc\n(round)", "groups\nown/peer",
           "filtered", "IS w\nmean", "sent", "recv")


class View(Protocol):
    def show(self, nodes: Sequence[NodeProgress], new: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """Show the nodes' state; ``new`` lists the step records (node name, record) that just arrived."""
        ...

    def note(self, line: str) -> None:
        """A message above the view."""
        ...

    def close(self) -> None:
        """Leave the last drawing on the terminal; idempotent."""
        ...


def make_view(mode: str, rounds: int, echo: Callable[[str], None], console: Console | None = None) -> View:
    if mode == "auto":
        mode = "table" if sys.stdout.isatty() else "lines"
    if mode == "table":
        return TableView(rounds, console or Console())
    if mode == "lines":
        return LinesView(echo)
    raise ValueError(f"unknown view {mode!r}: expected auto, table or lines")


def row(progress: NodeProgress) -> list[str]:
    """The node's row: its latest step and latest evaluation ('-' before they exist)."""
    step, evaluation = progress.latest_step, progress.latest_evaluation
    cells = [progress.name, f"{progress.model} ({progress.adapter})"]
    if step is None:
        cells += ["-", "-", "-"]
    else:
        cells += [str(step["round"]), fixed(step["own_reward"]), fixed(step["peer_reward"])]
    cells.append("-" if evaluation is None else f"{evaluation.accuracy:.3f} ({evaluation.round})")
    if step is None:
        return [*cells, "-", "-", "-", "-", "-"]
    trained = step["train_trained"]
    return [
        *cells,
        f"{step['own_groups']}/{step['peer_groups_used']}",
        percent(step["train_filtered_fraction"]) if trained else "no step",
        f"{step['train_is_weight_mean']:.2f}" if trained else "-",
        size(step["bytes_sent_total"]),
        size(step["bytes_received_total"]),
    ]


def step_line(name: str, width: int, record: Mapping[str, Any]) -> str:
    r = record
    line = f"{name:<{width}}  round {r['round']:>4}  reward own {fixed(r['own_reward'])} peer {fixed(r['peer_reward'])}"
    if r["eval_accuracy"] is not None:
        line += f"  eval {r['eval_accuracy']:.3f}"
    line += f"  groups own {r['own_groups']} peer {r['peer_groups_used']}/{r['peer_groups_received']}"
    if r["train_trained"]:
        line += f"  filtered {percent(r['train_filtered_fraction'])}  IS {r['train_is_weight_mean']:.2f}"
    else:
        line += "  no step (no reward variance)"
    return line + f"  sent {size(r['bytes_sent_total'])} recv {size(r['bytes_received_total'])}"


class LinesView:
    def __init__(self, echo: Callable[[str], None]):
        self._echo = echo

    def show(self, nodes: Sequence[NodeProgress], new: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        width = max((len(node.name) for node in nodes), default=0)
        for name, record in new:
            self._echo(step_line(name, width, record))

    def note(self, line: str) -> None:
        self._echo(line)

    def close(self) -> None:
        pass


class TableView:
    def __init__(self, rounds: int, console: Console):
        self.rounds = rounds
        self._console = console
        self._started_at = time.monotonic()
        # No refresh thread: the demo redraws after each look at the metrics files.
        self._live = Live(console=console, auto_refresh=False, redirect_stdout=True, redirect_stderr=True)
        self._live_on = False

    def show(self, nodes: Sequence[NodeProgress], new: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        if not self._live_on:
            self._live.start()
            self._live_on = True
        self._live.update(self.table(nodes), refresh=True)

    def table(self, nodes: Sequence[NodeProgress]) -> Table:
        elapsed = time.monotonic() - self._started_at
        table = Table(title=f"ftis-node demo: {len(nodes)} nodes, {self.rounds} rounds each",
                      caption=f"{elapsed:.0f} s since the nodes started; Ctrl-C stops every process",
                      box=box.SIMPLE_HEAD, show_edge=False, header_style="bold")
        for name in COLUMNS:
            table.add_column(name, justify="left" if name in ("node", "model") else "right", no_wrap=True)
        for node in nodes:
            table.add_row(*row(node))
        return table

    def note(self, line: str) -> None:
        self._console.print(line, markup=False, highlight=False)

    def close(self) -> None:
        if self._live_on:
            self._live.stop()
            self._live_on = False
