"""A node's per-step metrics and where they go.

One flat record per step (``report_record``) is the single source of every output:
- ``DIR/metrics.jsonl``: one JSON object per line, appended and flushed every step;
- ``DIR/tensorboard/``: TensorBoard event files, one scalar per figure (``tensorboard_scalars`` names
  them; view with ``tensorboard --logdir DIR/tensorboard``);
- the terminal (``display.py``): a live table, or one summary line per step off a terminal;
- ``DIR/peers.json``: the node's tables of its peers (scores, mutes, rejections and use by peer), for at most
  ``peer_tables.MAX_PEERS_KEPT`` peers (``swarm/peers/peer_view.py``), replaced every step, for ``ftis-node status
  --node DIR`` and the dashboard; ``metrics.jsonl`` holds their counts, so that its lines do not grow with the peers.

A figure is declared once: a round's as a field of ``RoundReport`` (``round_report.py``), the training
step's as a field of ``StepFigures`` (``trainer/step_figures.py``); its record key, its TensorBoard tag and
its place on the terminal all follow from there (``node/figures.py``).

``RunMetrics`` ties them together for the run loop: ``record(report, eval_accuracy=None)`` once per
step, ``close()`` at the end. The files are written on a background thread (``writer.py``), in order, so
the loop only hands records over; ``close()`` writes everything handed over, and a failed write is raised
in the loop's thread by the next record (or ``close``).
"""

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from ftis.node import figures
from ftis.node.config import MetricsConfig
from ftis.node.records.display import Display, make_display
from ftis.node.records.peer_tables import round_peer_view
from ftis.node.records.round_report import RoundReport, SwarmFigures
from ftis.node.records.utilisation import LoopLap
from ftis.node.records.writer import BackgroundWriter
from ftis.node.swarm.peers.peer_view import write_peer_view
from ftis.node.swarm.transport import TransportStats

Record = dict[str, Any]


def report_record(report: RoundReport, previous: TransportStats | None = None,
                  eval_accuracy: float | None = None, loop: LoopLap | None = None, alone_s: float = 0.0) -> Record:
    """A flat, JSON-ready record of one step: every figure ``RoundReport`` declares, in its order. ``previous``
    is the transport snapshot of the step before (None for the first): per-step traffic and rejections are the
    differences from it. ``loop``: the round's share of the run loop's wall time (``utilisation.py``), when the
    run loop measured it; ``alone_s``: seconds since the node last saw a peer (``runner/alone.py``)."""
    lap = {} if loop is None else loop.figures()
    recorded = replace(report, time=time.time(), eval_accuracy=eval_accuracy, alone_seconds=alone_s,
                       swarm=SwarmFigures.between(report.transport, previous, report.scores), **lap)
    return figures.record(recorded)


def tensorboard_scalars(record: Mapping[str, Any]) -> dict[str, float]:
    """The record's figures as TensorBoard tags and values, as ``RoundReport`` declares them; unknown ones
    (None, NaN) are left out, and so are training figures of a step that was not taken."""
    scalars = figures.scalars(RoundReport, record)
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

    def __init__(self, folder: Path, config: MetricsConfig, echo: Callable[[str], None], console: Any = None,
                 directory: str = ""):
        """``directory``: how the node reads the swarm (``SwarmConfig.sampling_line``), for ``status --node``."""
        self._directory = directory
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
        view = round_peer_view(report, record["time"], alone_s, self._directory)
        self._writer.submit(write_peer_view, self._folder, view)  # for ftis-node status --node, the dashboard
        if self.tensorboard is not None:
            self._writer.submit(self.tensorboard.write, record)
        self.display.show(record, view.rejections)
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
