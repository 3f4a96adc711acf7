"""What the dashboard keeps of a node's ``metrics.jsonl``: bounded series, read incrementally.

    tail = MetricsTail(folder / "metrics.jsonl")
    for record in tail.read_new():      # only the lines appended since the last call, a chunk at a time
        ...
    series = BoundedSeries(limit=400)
    series.add(round, value)            # at most ``limit`` points kept, evenly spread over the run

A node appends one record per round for as long as it runs, so a dashboard left open for days must
neither reread the file nor keep every point: ``MetricsTail`` remembers its offset and reads in
chunks of ``CHUNK_BYTES``, and ``BoundedSeries`` keeps every ``stride``-th point, doubling the stride
(and dropping every other point kept) whenever it would go over its limit. Memory is then
``limit`` points per line, whatever the run's length; the first and the latest point are always shown.

Unlike the demo's ``MetricsFollower`` (``demo/follow.py``), which reads a file its own nodes write, the
dashboard may be pointed at any folder: a damaged line is counted and skipped, never raised, and a file
that shrank (replaced by a new run) is read again from its start.
"""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHUNK_BYTES = 1 << 20  # read at most this much at once; a record is a few kB
MAX_LINE_BYTES = 1 << 20  # a "line" longer than this without a newline is no record: dropped


class MetricsTail:
    """New complete records of a ``metrics.jsonl`` file at each call; nothing while it does not exist."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0  # bytes of the file consumed
        self.damaged = 0  # lines that were no JSON object, skipped
        self.restarts = 0  # times the file was found shorter than what was read: read again from 0
        self._partial = b""

    def read_new(self) -> Iterator[dict[str, Any]]:
        """The records appended since the last call, one chunk at a time: however much was appended, no more
        than a chunk's records are held at once (consume them before calling again)."""
        try:
            handle = self.path.open("rb")
        except FileNotFoundError:
            return
        with handle:
            if handle.seek(0, 2) < self.offset:
                self.offset, self._partial = 0, b""
                self.restarts += 1
            handle.seek(self.offset)
            while chunk := handle.read(CHUNK_BYTES):
                self.offset += len(chunk)
                yield from self._lines(chunk)

    def _lines(self, chunk: bytes) -> list[dict[str, Any]]:
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()  # b"" after a complete last line; kept until its newline arrives
        if len(self._partial) > MAX_LINE_BYTES:
            self._partial = b""
            self.damaged += 1
        records = []
        for line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if isinstance(record, dict):
                records.append(record)
            else:
                self.damaged += 1
        return records


class BoundedSeries:
    """(x, y) points, at most ``limit`` of them: every ``stride``-th point offered, plus the latest."""

    def __init__(self, limit: int):
        if limit < 2:
            raise ValueError(f"a series keeps at least 2 points, not {limit}")
        self.limit = limit
        self.stride = 1
        self.offered = 0  # points offered so far (those that replaced the one before at the same x not counted)
        self._kept: list[tuple[float, float]] = []
        self._latest: tuple[float, float] | None = None  # the newest point, when the stride skipped it

    def add(self, x: float, y: float) -> None:
        last = self._latest or (self._kept[-1] if self._kept else None)
        if last is not None and last[0] == x:  # the same round again (its evaluation, then its step): the newer
            self._replace_last((x, y))
            return
        if self.offered % self.stride == 0:
            self._kept.append((x, y))
            self._latest = None
            if len(self._kept) > self.limit - 1:  # room for the latest point, when it is not a kept one
                self._kept = self._kept[::2]
                self.stride *= 2
        else:
            self._latest = (x, y)
        self.offered += 1

    def _replace_last(self, point: tuple[float, float]) -> None:
        if self._latest is not None:
            self._latest = point
        else:
            self._kept[-1] = point

    def points(self) -> list[tuple[float, float]]:
        return self._kept + ([self._latest] if self._latest is not None else [])

    def __len__(self) -> int:
        return len(self._kept) + (self._latest is not None)
