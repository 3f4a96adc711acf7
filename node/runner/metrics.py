"""A node's per-step metrics and where they go.

One flat record per step (``report_record``) is the single source of every output:
- ``DIR/metrics.jsonl``: one JSON object per line, appended and flushed every step;
- ``DIR/tensorboard/``: TensorBoard event files, one scalar per figure (``tensorboard_scalars`` names
  them; view with ``tensorboard --logdir DIR/tensorboard``);
- the terminal (``display.py``): a live table, or one summary line per step off a terminal;
- ``DIR/peers.json``: the node's scores of its peers (``swarm/peer_view.py``), replaced every step, for
  ``ftis-node status --node DIR``.

A figure of the training step is declared once, as a field of ``StepMetrics`` (``trainer/step_metrics.py``):
its record key ``train_<name>``, its TensorBoard tag and its place on the terminal all follow from there.

``RunMetrics`` ties them together for the run loop: ``record(report, eval_accuracy=None)`` once per
step, ``close()`` at the end. The files are written on a background thread (``writer.py``), in order, so
the loop only hands records over; ``close()`` writes everything handed over, and a failed write is raised
in the loop's thread by the next record (or ``close``).

Rewards are binary (1: right format and answer), so a mean reward is an accuracy: ``own_reward`` is this
node's sampling accuracy, ``peer_reward`` the accuracy this node grants its peers' completions when it
scores them with its own task.
"""

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from ftis.node.config import MetricsConfig
from ftis.node.runner.display import Display, make_display
from ftis.node.runner.node import RoundReport
from ftis.node.runner.utilisation import LoopLap
from ftis.node.runner.writer import BackgroundWriter
from ftis.node.swarm.peer_view import PeerView, write_peer_view
from ftis.node.swarm.transport import TransportStats
from ftis.node.trainer.step_metrics import FIGURES, record_key

Record = dict[str, Any]


def report_record(report: RoundReport, previous: TransportStats | None = None,
                  eval_accuracy: float | None = None, loop: LoopLap | None = None, alone_s: float = 0.0) -> Record:
    """A flat, JSON-ready record of one step. ``previous`` is the transport snapshot of the step
    before (None for the first): per-step traffic and rejections are the differences from it. ``loop``:
    the round's share of the run loop's wall time (``utilisation.py``), when the run loop measured it;
    ``alone_s``: seconds since the node last saw a peer (``alone.py``)."""
    now, before = report.transport, previous or TransportStats()
    return {
        "round": report.round,
        "time": time.time(),
        "own_reward": report.own_reward,
        "peer_reward": report.peer_reward,
        "eval_accuracy": eval_accuracy,
        "own_groups": report.own_groups,
        "peer_groups_received": report.peer_groups_received,
        "peer_groups_used": report.peer_groups_used,
        "peer_groups_by_peer": dict(report.peer_groups_by_peer),
        "unusable_groups": report.unusable_groups,
        "generation_tokens": report.generation_tokens,
        "generation_seconds": report.generation_seconds,
        "generation_tokens_per_s": report.generation_tokens / report.generation_seconds
        if report.generation_seconds > 0 else 0.0,
        "waited_seconds": report.waited_seconds,
        "late_peers": report.late_peers,
        "merged_groups": report.merged_groups,
        "merged_group_size": report.merged_group_size,
        "mismatched_groups": report.mismatched_groups,
        **{f"generator_{key}": value for key, value in report.generator.items()},
        **{record_key(name): value for name, value in asdict(report.step).items()},  # every StepMetrics figure
        "bytes_sent": now.published_bytes - before.published_bytes,
        "bytes_received": now.delivered_bytes - before.delivered_bytes,
        "batches_sent": now.published_batches - before.published_batches,
        "batches_received": now.delivered_batches - before.delivered_batches,
        "bytes_sent_total": now.published_bytes,
        "bytes_received_total": now.delivered_bytes,
        "rejections": _by_reason(now.rejections, before.rejections),
        "rejections_total": _by_reason(now.rejections, {}),
        "rejections_by_peer": _by_peer(now.rejections),
        "peer_scores": {peer: judged.score for peer, judged in report.scores.items()},
        "muted_peers": sorted(peer for peer, judged in report.scores.items() if judged.muted_until is not None),
        "announce_failures_total": now.announce_failures,
        "poll_failures_total": now.poll_failures,
        "serves_turned_away_total": now.serves_turned_away,
        "alone_seconds": alone_s,
        **(loop.record() if loop is not None else {}),
    }


def _by_reason(now: Mapping[tuple[str, str], int], before: Mapping[tuple[str, str], int]) -> dict[str, int]:
    """Rejections counted since ``before``, summed over peers; reasons with none are left out."""
    counts: dict[str, int] = {}
    for (peer, reason), count in now.items():
        new = count - before.get((peer, reason), 0)
        if new:
            counts[reason] = counts.get(reason, 0) + new
    return dict(sorted(counts.items()))


def _by_peer(rejections: Mapping[tuple[str, str], int]) -> dict[str, dict[str, int]]:
    peers: dict[str, dict[str, int]] = {}
    for (peer, reason), count in sorted(rejections.items()):
        peers.setdefault(peer, {})[reason] = count
    return peers


# TensorBoard tag -> record field, for the round's figures; the training step's declare their own tags
# (``StepMetrics``, ``trainer/step_metrics.py``).
_SCALARS = {
    "reward/own": "own_reward",
    "reward/peer": "peer_reward",
    "eval/accuracy": "eval_accuracy",
    "groups/own": "own_groups",
    "groups/peer_used": "peer_groups_used",
    "groups/peer_received": "peer_groups_received",
    "groups/unusable": "unusable_groups",
    "throughput/generation_tokens_per_s": "generation_tokens_per_s",
    "swarm/bytes_sent": "bytes_sent",
    "swarm/bytes_received": "bytes_received",
    "swarm/bytes_sent_total": "bytes_sent_total",
    "swarm/bytes_received_total": "bytes_received_total",
    "swarm/batches_received": "batches_received",
    "swarm/announce_failures_total": "announce_failures_total",
    "swarm/poll_failures_total": "poll_failures_total",
    "swarm/serves_turned_away_total": "serves_turned_away_total",
    "swarm/alone_seconds": "alone_seconds",
    "loop/waited_seconds": "waited_seconds",
    "loop/late_peers": "late_peers",
    "horizontal/merged_groups": "merged_groups",
    "horizontal/merged_group_size": "merged_group_size",
    "horizontal/mismatched_groups": "mismatched_groups",
}
# The step's figures that have a tag; a figure not marked ``every_step`` only means something when a step was taken.
_STEP_SCALARS = {figure.tag: record_key(name) for name, figure in FIGURES.items() if figure.tag and figure.every_step}
_TRAINED_SCALARS = {figure.tag: record_key(name) for name, figure in FIGURES.items()
                    if figure.tag and not figure.every_step}


def tensorboard_scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """The record's figures as TensorBoard tags and values; unknown ones (None, NaN) are left out, and
    so are training figures of a step that was not taken."""
    fields = {**_SCALARS, **_STEP_SCALARS, **(_TRAINED_SCALARS if record[record_key("trained")] else {})}
    scalars = {tag: record[name] for tag, name in fields.items()}
    scalars |= {f"groups/peer/{peer}": count for peer, count in record["peer_groups_by_peer"].items()}
    scalars |= {f"rejections/{reason}": count for reason, count in record["rejections"].items()}
    scalars["rejections/all"] = sum(record["rejections"].values())
    scalars |= {f"peers/score/{peer}": score for peer, score in record["peer_scores"].items()}
    scalars["peers/muted"] = len(record["muted_peers"])
    scalars |= {f"generator/{key[len('generator_'):]}": value for key, value in record.items()
                if key.startswith("generator_") and isinstance(value, int | float)}
    scalars |= {f"loop/{key[len('loop_'):]}": value for key, value in record.items() if key.startswith("loop_")}
    if "utilisation" in record:
        scalars["loop/utilisation"] = record["utilisation"]
    return {tag: float(value) for tag, value in scalars.items() if value is not None and math.isfinite(value)}


class MetricsLog:
    """``metrics.jsonl`` in ``folder``: one record per line, appended (a resumed run continues the file).
    With a ``writer``, ``write`` hands the line to its thread (close the writer before the log)."""

    def __init__(self, folder: Path, writer: BackgroundWriter | None = None):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "metrics.jsonl"
        self._file: IO[str] = self.path.open("a", encoding="utf-8")
        self._writer = writer

    def write(self, record: Mapping[str, Any]) -> None:
        if self._writer is None:
            self._write_now(record)
        else:
            self._writer.submit(self._write_now, dict(record))

    def _write_now(self, record: Mapping[str, Any]) -> None:
        line = {key: _json_number(value) for key, value in record.items()}
        self._file.write(json.dumps(line, allow_nan=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _json_number(value: object) -> object:
    """NaN (no peer groups this step) and infinities are not JSON: they are written as null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


class TensorBoardLog:
    """TensorBoard event files in ``folder``, one scalar per figure at global step = the round.

    tensorboardX writes real event files with protobuf and numpy only (no TensorFlow, no
    ``tensorboard`` package); it is imported here so that a node run without TensorBoard never loads it.
    """

    def __init__(self, folder: Path):
        from tensorboardX import SummaryWriter

        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self._writer = SummaryWriter(logdir=str(folder), flush_secs=10)

    def write(self, record: Mapping[str, Any]) -> None:
        for tag, value in tensorboard_scalars(record).items():
            self._writer.add_scalar(tag, value, global_step=record["round"], walltime=record["time"])
        self._writer.flush()  # a step takes seconds or more: each one is on disk when the next starts

    def close(self) -> None:
        self._writer.close()


class RunMetrics:
    """Everything a run writes per step: ``metrics.jsonl``, TensorBoard events (unless disabled) and
    the terminal display, in the node's folder ``folder``."""

    def __init__(self, folder: Path, config: MetricsConfig, echo: Callable[[str], None], console: Any = None):
        self._writer = BackgroundWriter()  # the files; the display stays in the loop's thread, in step with its lines
        self.log = MetricsLog(folder, self._writer)
        self._folder = folder
        self.tensorboard = TensorBoardLog(folder / "tensorboard") if config.tensorboard else None
        self.display: Display = make_display(config.display, echo, rows=config.table_rows, console=console)
        self._previous: TransportStats | None = None

    def record(self, report: RoundReport, eval_accuracy: float | None = None, loop: LoopLap | None = None,
               alone_s: float = 0.0) -> Record:
        """Write and show one step; ``eval_accuracy`` is the held-out accuracy when this step evaluated,
        ``loop`` the round's share of the run loop's wall time, ``alone_s`` the seconds since a peer was seen."""
        record = report_record(report, self._previous, eval_accuracy, loop, alone_s)
        self._previous = report.transport
        self.log.write(record)
        self._writer.submit(write_peer_view, self._folder, PeerView(  # for ftis-node status --node
            record["time"], report.round, report.scores, record["rejections_by_peer"],
            announce_failures=report.transport.announce_failures, poll_failures=report.transport.poll_failures,
            alone_seconds=alone_s))
        if self.tensorboard is not None:
            self._writer.submit(self.tensorboard.write, record)
        self.display.show(record)
        return record

    def flush(self) -> None:
        """Wait until every record handed over is in the files (``peers.json`` included)."""
        self._writer.flush()

    def close(self) -> None:
        """Write every record handed over, then close the files and the display; raises a failed write's
        error that no ``record`` raised yet."""
        try:
            self._writer.close()
        finally:
            self._close_outputs()

    def _close_outputs(self) -> None:
        try:
            self.display.close()
        finally:
            try:
                if self.tensorboard is not None:
                    self.tensorboard.close()
            finally:
                self.log.close()
