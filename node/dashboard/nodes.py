"""One node's folder as the dashboard shows it: its ``metrics.jsonl`` as bounded series (``series.py``)
and its latest view of its peers (``peers.json``, ``swarm/peers/peer_view.py``).

    watch = NodeWatch(Path("runs/demo/x/small"), "small", points=400)
    watch.state()   # reads what the node appended since the last call; a JSON-ready dict

The folder may not exist yet (a node about to start): the node is then shown with nothing read. Peer ids and
reasons from ``peers.json`` are handed to the page through ``printable``.
"""

import math
import time
from pathlib import Path
from typing import Any, TypeGuard

from ftis.node.dashboard.charts import LINES
from ftis.node.dashboard.series import BoundedSeries, MetricsTail
from ftis.node.printable import printable
from ftis.node.records.peer_tables import kept_peers
from ftis.node.records.record_kinds import is_evaluation, is_step
from ftis.node.swarm.peers.peer_view import PeerViewError, muted_now, read_peer_view
from ftis.node.trainer.step_figures import record_key

METRICS_FILE = "metrics.jsonl"  # records/metrics.py's MetricsLog writes it into the node's folder
MAX_PEERS = 200  # peers.json rows shown, those that tell most first; a node's view holds up to MAX_PEERS_KEPT


class NodeWatch:
    def __init__(self, folder: Path, name: str, points: int):
        self.folder, self.name = folder, name
        self.tail = MetricsTail(folder / METRICS_FILE)
        self.series = {line.key: BoundedSeries(points) for line in LINES}
        self.records = 0
        self.latest: dict[str, Any] = {}  # the newest step's round, time and policy version, the newest evaluation

    def refresh(self) -> None:
        for record in self.tail.read_new():
            self._add(record)

    def _add(self, record: dict[str, Any]) -> None:
        x = record.get("round")
        if not _finite(x):
            self.tail.damaged += 1
            return
        self.records += 1
        for key, series in self.series.items():
            value = record.get(key)
            if _finite(value):
                series.add(float(x), float(value))
        if is_step(record):
            self.latest |= {"round": x, "time": _number(record.get("time")),
                            "policy_version": _number(record.get(record_key("policy_version")))}
        elif is_evaluation(record) and _finite(record.get("eval_accuracy")):
            self.latest |= {"eval_round": x, "eval_accuracy": record["eval_accuracy"],
                            "eval_standard_error": _number(record.get("eval_standard_error"))}

    def state(self, now: float | None = None) -> dict[str, Any]:
        """What the page shows of this node, after reading what was appended since the last call."""
        self.refresh()
        return {
            "name": self.name,
            "folder": str(self.folder),
            "records": self.records,
            "damaged_lines": self.tail.damaged,
            "latest": self.latest,
            "series": {key: series.points() for key, series in self.series.items()},
            "peers": peers_state(self.folder, time.time() if now is None else now),
        }


def peers_state(folder: Path, now: float) -> dict[str, Any]:
    """The node's latest scores of its peers and mutes, or why there are none."""
    try:
        view = read_peer_view(folder)
    except PeerViewError as error:
        return {"error": printable(str(error), max_chars=500)}
    rows = []
    known = view.scores.keys() | view.rejections.keys()
    for peer_id in kept_peers(known, {}, view.scores, view.rejections, max_peers=MAX_PEERS):
        score = view.scores.get(peer_id)
        until = score.muted_until if score is not None and muted_now(score, now) else None
        rows.append({
            "peer_id": printable(peer_id),
            "score": None if score is None else _number(score.score),
            "good": None if score is None else _number(score.good),
            "bad": None if score is None else _number(score.bad),
            "muted_for_s": None if until is None else _number(until - now),
            "mutes": None if score is None else score.mutes,
            "rejections": {printable(reason): count for reason, count in view.rejections.get(peer_id, {}).items()},
        })
    return {"round": view.round, "time": view.time, "announce_failures": view.announce_failures,
            "poll_failures": view.poll_failures, "alone_seconds": _number(view.alone_seconds),
            "peers": rows, "more": len(known) - len(rows) + view.left_out}


def _finite(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _number(value: object) -> int | float | None:
    """``value`` if it is a finite number, else None (the page gets JSON, which has no NaN)."""
    return value if _finite(value) else None
