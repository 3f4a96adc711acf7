"""What a running node shows on its terminal, one step at a time.

Two displays behind one small interface (``show(record, rejections)`` each step, ``close()`` at the end), both
reading the flat records that ``metrics.py`` writes to ``metrics.jsonl`` (and the table, the rejections by peer
that ``peers.json`` holds):
- ``TableDisplay``: a live rich table of the last steps and, below it, the peers whose groups this
  node trained on or that it refused (at most ``MAX_PEER_ROWS``), redrawn in place each step (on a terminal);
  the caption counts muted peers;
- ``LineDisplay``: one summary line per step (``summary_line``), for logs and pipes.

Peer ids reach the terminal through ``printable`` (no control or bidi character of a peer's), and as rich
``Text``, never as markup.

``make_display("auto" | "table" | "lines", echo)`` picks one; ``auto`` shows the table only when
standard output is a terminal.

The established figures are laid out by hand below (``_LAID_OUT``, ``_LAID_OUT_ROUND``); every other figure
``StepFigures`` (``trainer/step_figures.py``) or ``RoundReport`` (``round_report.py``) marks ``shown``
follows them by name, in the summary line and as a column of the table, with no change here.
"""

import math
import sys
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ftis.node.figures import Figure, declared
from ftis.node.printable import printable
from ftis.node.records.round_report import ALONE_AFTER_S, RoundReport
from ftis.node.trainer.step_figures import FIGURES, record_key

Record = Mapping[str, Any]
Rejections = Mapping[str, Mapping[str, int]]  # peer -> reason -> count since the start
MAX_PEER_ROWS = 20  # the table's peers: those trained on this step first, then the most groups, the most refused
MAX_PEERS_COUNTED = 1024  # peers whose groups the table counts since the start: those trained on most lately


class Display(Protocol):
    def show(self, record: Record, rejections: Rejections | None = None) -> None:
        """Show one step's record; ``rejections``: by peer (``peers.json``'s), for the table's peers."""
        ...

    def close(self) -> None:
        """Leave the terminal as the last step left it; idempotent."""
        ...


def make_display(mode: str, echo: Callable[[str], None], rows: int = 8, console: Console | None = None) -> Display:
    """The display for ``mode``: ``table``, ``lines``, or ``auto`` (the table on a terminal)."""
    if mode == "auto":
        mode = "table" if sys.stdout.isatty() else "lines"
    if mode == "table":
        return TableDisplay(console or Console(), rows)
    if mode == "lines":
        return LineDisplay(echo)
    raise ValueError(f"unknown display {mode!r}: expected auto, table or lines")


class LineDisplay:
    def __init__(self, echo: Callable[[str], None]):
        self._echo = echo

    def show(self, record: Record, rejections: Rejections | None = None) -> None:
        self._echo(summary_line(record))

    def close(self) -> None:
        pass


def summary_line(record: Record) -> str:
    """One step in one line: rewards, groups, filter, IS weights, throughput, traffic, rejections."""
    r = record
    rewards = f"reward own {fixed(r['own_reward'])} peer {fixed(r['peer_reward'])}"
    if r["eval_accuracy"] is not None:
        rewards += f" eval {fixed(r['eval_accuracy'])}"
    peers = len(r["peer_groups_by_peer"])
    groups = (f"groups own {r['own_groups']} peer {r['peer_groups_used']}/{r['peer_groups_received']}"
              f" from {peers} peer{'' if peers == 1 else 's'}"
              + "".join(f"  {name} {value}" for name, value in _more_round_figures(r).items()))
    if r["train_trained"]:
        trained = (f"loss {r['train_loss']:+.4f}  filtered {percent(r['train_filtered_fraction'])}"
                   f" (adv {percent(r['train_filtered_advantage_fraction'])}"
                   f" div {percent(r['train_filtered_divergence_fraction'])})"
                   f"  IS {r['train_is_weight_mean']:.2f}/{r['train_is_weight_max']:.2f}"
                   f" trunc {percent(r['train_truncated_fraction'])}  D {r['train_divergence_mean']:.3f}"
                   + "".join(f"  {name} {value}" for name, value in _more_figures(r).items()))
    elif r.get("train_refused"):
        culprits = ", ".join(printable(peer) for peer in r.get("train_nonfinite_peers") or []) or "no single peer"
        trained = f"STEP REFUSED: loss or gradient not finite (from {culprits})"
    else:
        trained = "no step (no reward variance)"
    speed = (f"gen {r['generation_tokens_per_s']:.0f} tok/s  train {r['train_tokens']} tok"
             f" {r['train_tokens_per_s']:.0f} tok/s")
    traffic = f"sent {size(r['bytes_sent'])} recv {size(r['bytes_received'])}"
    muted = f"  muted {r['peers_muted']}" if r["peers_muted"] else ""
    return (f"round {r['round']:>5}  v{r['train_policy_version']:<5} {rewards}  {groups}  {trained}  {speed}  "
            f"{traffic}  rejected {_rejections(r['rejections'])}{muted}{_contact(r)}")


def _contact(r: Record) -> str:
    """The node's contact with the swarm, when something is wrong with it."""
    failures = r.get("announce_failures_total", 0) + r.get("poll_failures_total", 0)
    text = f"  DHT failures {r.get('announce_failures_total', 0)}/{r.get('poll_failures_total', 0)}" if failures else ""
    if r.get("alone_seconds", 0.0) >= ALONE_AFTER_S:
        text += f"  ALONE for {r['alone_seconds']:.0f} s"
    return text


class TableDisplay:
    """The last ``rows`` steps as a table redrawn in place; the terminal keeps the last drawing."""

    def __init__(self, console: Console, rows: int = 8):
        self._records: deque[Record] = deque(maxlen=rows)
        self._groups_total: OrderedDict[str, int] = OrderedDict()  # the peers trained on most lately last
        self._rejections: Rejections = {}
        self._eval: tuple[int, float] | None = None  # (round, accuracy) of the latest evaluation
        # No refresh thread: the table changes once per step, and is redrawn then.
        self._live = Live(console=console, auto_refresh=False, redirect_stdout=True, redirect_stderr=True)
        self._started = False

    def show(self, record: Record, rejections: Rejections | None = None) -> None:
        self._records.append(record)
        self._rejections = rejections or {}
        for peer, count in record["peer_groups_by_peer"].items():
            self._groups_total[peer] = self._groups_total.pop(peer, 0) + count
        while len(self._groups_total) > MAX_PEERS_COUNTED:
            self._groups_total.popitem(last=False)
        if record["eval_accuracy"] is not None:
            self._eval = (record["round"], record["eval_accuracy"])
        if not self._started:  # started at the first step, so lines printed before it stay above
            self._live.start()
            self._started = True
        self._live.update(self.renderable(), refresh=True)

    def close(self) -> None:
        if self._started:
            self._live.stop()
            self._started = False

    def renderable(self) -> Group:
        return Group(self._steps_table(), self._peers_table())

    def _steps_table(self) -> Table:
        latest = self._records[-1]
        caption = f"rejected this step: {_rejections(latest['rejections'])}"
        if latest["peers_muted"]:
            caption += f"   muted peers: {latest['peers_muted']}"
        if self._eval is not None:
            caption += f"   eval accuracy {self._eval[1]:.3f} at round {self._eval[0]}"
        caption += _contact(latest)
        table = Table(title=f"ftis-node: last steps (policy v{latest['train_policy_version']})", caption=caption,
                      box=box.SIMPLE_HEAD, show_edge=False, header_style="bold")
        more = [name.replace("_", "\n", 1) for name, _ in (*_MORE, *_MORE_ROUND)]
        for name in (*_STEP_COLUMNS[:9], *more, *_STEP_COLUMNS[9:]):
            table.add_column(name, justify="right", no_wrap=True)
        for r in self._records:
            trained = r["train_trained"]
            table.add_row(
                str(r["round"]),
                fixed(r["own_reward"]),
                fixed(r["peer_reward"]),
                fixed(r["eval_accuracy"]),
                f"{r['own_groups']}/{r['peer_groups_used']}/{r['peer_groups_received']}",
                f"{percent(r['train_filtered_fraction'])} {percent(r['train_filtered_advantage_fraction'])}/"
                f"{percent(r['train_filtered_divergence_fraction'])}" if trained
                else "refused" if r.get("train_refused") else "no step",
                f"{r['train_is_weight_mean']:.2f}/{r['train_is_weight_max']:.2f}" if trained else "-",
                percent(r["train_truncated_fraction"]) if trained else "-",
                f"{r['train_divergence_mean']:.3f}" if trained else "-",
                *(_more_figures(r).values() if trained else ["-"] * len(_MORE)),
                *_more_round_figures(r).values(),
                f"{r['generation_tokens_per_s']:.0f}",
                f"{r['train_tokens_per_s']:.0f}",
                size(r["bytes_sent"]),
                size(r["bytes_received"]),
                str(sum(r["rejections"].values())),
            )
        return table

    def _peers_table(self) -> Table:
        latest = self._records[-1]
        table = Table(title="peers: groups trained on, rejections", box=box.SIMPLE_HEAD, show_edge=False,
                      header_style="bold")
        for name in ("peer", "this step", "total", "rejected (total)"):
            table.add_column(name, justify="left" if name == "peer" else "right")
        this_step, rejected = latest["peer_groups_by_peer"], self._rejections

        def telling(peer: str) -> tuple[int, int, int, str]:
            return (this_step.get(peer, 0), self._groups_total.get(peer, 0), sum(rejected.get(peer, {}).values()),
                    peer)

        peers = sorted(self._groups_total.keys() | rejected.keys(), key=telling, reverse=True)
        for peer in peers[:MAX_PEER_ROWS]:
            table.add_row(Text(printable(_short(peer))), str(this_step.get(peer, 0)),
                          str(self._groups_total.get(peer, 0)), _rejections(rejected.get(peer, {})))
        if len(peers) > MAX_PEER_ROWS:
            table.add_row(f"{len(peers) - MAX_PEER_ROWS} more", "", "", "")
        if not table.row_count:
            table.add_row("none yet", "0", "0", "0")
        return table


# Two-line headers: "acc" is the mean binary reward; groups are own/peers' used/peers' received;
# filtered is the fraction of completions dropped, then its share by advantage / by divergence.
_STEP_COLUMNS = ("round", "acc\nown", "acc\npeer", "acc\neval", "groups\nown/peer/rcvd", "filtered\nall adv/div",
                 "IS w\nmean/max", "trunc", "D", "gen\ntok/s", "train\ntok/s", "sent", "recv", "rej")


# The step's figures the layout above shows in its own words.
_LAID_OUT = {"trained", "policy_version", "loss", "tokens", "filtered_fraction", "filtered_advantage_fraction",
             "filtered_divergence_fraction", "is_weight_mean", "is_weight_max", "truncated_fraction",
             "divergence_mean", "refused", "nonfinite_peers", "tokens_per_s"}
# ...and the others shown, by name after them.
_MORE: tuple[tuple[str, Figure], ...] = tuple((name, figure) for name, figure in FIGURES.items()
                                              if figure.shown and name not in _LAID_OUT)


# The round's figures the layout shows in its own words (sections, such as the swarm's, are laid out by hand).
_LAID_OUT_ROUND = {"round", "own_reward", "peer_reward", "eval_accuracy", "own_groups", "peer_groups_received",
                   "peer_groups_used", "peer_groups_by_peer", "generation_tokens_per_s", "alone_seconds"}
# ...and the others shown, by name after them.
_MORE_ROUND: tuple[tuple[str, Figure], ...] = tuple(
    (name, figure) for name, figure in declared(RoundReport).items()
    if figure.shown and figure.prefix is None and name not in _LAID_OUT_ROUND)


def _more_figures(r: Record) -> dict[str, str]:
    """The step's shown figures beyond the laid-out ones, written by their unit: name -> text."""
    return {name: _written(r[record_key(name)], figure) for name, figure in _MORE}


def _more_round_figures(r: Record) -> dict[str, str]:
    """The round's shown figures beyond the laid-out ones, written by their unit: name -> text."""
    return {name: _written(r[name], figure) for name, figure in _MORE_ROUND}


def _written(value: float, figure: Figure) -> str:
    if figure.unit == "fraction":
        return percent(value)
    return f"{value:.0f}" if figure.unit == "count" else f"{value:.3g}"


def fixed(value: float | None) -> str:
    """A reward or accuracy; '-' when unknown (None, or NaN: nothing to measure this step)."""
    return "-" if value is None or math.isnan(value) else f"{value:.2f}"


def percent(value: float) -> str:
    return f"{value:.0%}"


def size(count: int) -> str:
    """A byte count in B, KiB, MiB or GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def _rejections(by_reason: Mapping[str, int]) -> str:
    total = sum(by_reason.values())
    if not total:
        return "0"
    return f"{total} (" + ", ".join(f"{reason} {count}" for reason, count in by_reason.items()) + ")"


def _short(peer_id: str) -> str:
    """libp2p ids share their first characters ('12D3KooW…'): the end tells peers apart."""
    return peer_id if len(peer_id) <= 16 else "…" + peer_id[-12:]
