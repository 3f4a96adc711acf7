"""``ftis-node experiment``: run every unfinished cell of the grid, then write the report.

    run_experiment(load_grid().adjusted(quick=True), Path("runs/quick"), echo=print, command="...")

Resumable: a cell is written when it finishes (``store.py``), and a rerun into the same folder skips
the cells already there, so an interrupted grid loses at most the cell it was running; more seeds or a
new condition later add cells to the same folder. Warm starts come from the warm-start cache
(``$FTIS_CACHE/warmup``, else ``~/.cache/ftis-node/warmup``, or each model's ``warmup.cache_dir``).

The process runs torch on one thread per node (``torch.set_num_threads(1)``): the nodes of a cell run in
parallel threads (``lockstep.py``), which is how the grid uses several cores.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ftis.node.atomic import write_atomic
from ftis.node.experiment.grid import Cell, Grid
from ftis.node.experiment.report import REPORT, write_report
from ftis.node.experiment.store import read_cell, write_cell

Echo = Callable[[str], None]
SETTINGS = "grid.json"  # the grid as run last, for the record


@dataclass(frozen=True)
class ExperimentResult:
    ran: int  # cells run by this call
    skipped: int  # cells found finished
    report: Path
    figures: list[Path]


def run_experiment(grid: Grid, out: Path, echo: Echo, command: str) -> ExperimentResult:
    import torch

    from ftis.node.experiment.cell import prepare_warm_starts, run_cell

    out.mkdir(parents=True, exist_ok=True)
    cells = grid.cells()
    todo = [cell for cell in cells if read_cell(out, cell, grid.fingerprint(cell.condition)) is None]
    echo(f"experiment: {len(cells)} cells ({len(grid.conditions)} conditions × {grid.seeds} seeds, "
         f"{len(grid.models)} models, {grid.rounds} rounds each) in {out}; "
         f"{len(cells) - len(todo)} finished already, {len(todo)} to run")
    write_atomic(out / SETTINGS, grid.model_dump_json(indent=1) + "\n")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if todo:
            warm = prepare_warm_starts(grid, echo)
            clock = _Eta(grid)
            for k, cell in enumerate(todo, start=1):
                record = run_cell(grid, cell, warm)
                write_cell(out, cell, record)
                clock.finished(cell, record["wall_seconds"])
                echo(f"[{k}/{len(todo)}] {cell.name}: {record['wall_seconds']:.0f} s  {_summary(record)}  "
                     f"| elapsed {_clock(clock.elapsed)}, ETA {_clock(clock.remaining(todo[k:]))}")
    finally:
        torch.set_num_threads(threads)
    paths = write_report(grid, out, command)
    echo(f"report: {out / REPORT}" + (f"; figures: {', '.join(str(p) for p in paths[1:])}" if paths[1:] else ""))
    return ExperimentResult(len(todo), len(cells) - len(todo), paths[0], paths[1:])


class _Eta:
    """Remaining time from this run's cells: the mean time of finished cells of the same kind (swarm or
    solo), else of any kind."""

    def __init__(self, grid: Grid):
        self._grid, self._started = grid, time.monotonic()
        self._seconds: dict[bool, list[float]] = {True: [], False: []}

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._started

    def finished(self, cell: Cell, seconds: float) -> None:
        self._seconds[self._kind(cell)].append(seconds)

    def remaining(self, cells: list[Cell]) -> float:
        every = [s for kind in self._seconds.values() for s in kind]
        overall = sum(every) / len(every)
        mean = {kind: sum(s) / len(s) if s else overall for kind, s in self._seconds.items()}
        return sum(mean[self._kind(cell)] for cell in cells)

    def _kind(self, cell: Cell) -> bool:
        return self._grid.conditions[cell.condition].swarm


def _summary(record: dict) -> str:
    return "  ".join(f"{label} ID {100 * node['id_accuracy'][-1]:.0f}% OOD {100 * node['ood_accuracy'][-1]:.0f}%"
                     for label, node in record["nodes"].items())


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes}m{seconds:02d}s"
