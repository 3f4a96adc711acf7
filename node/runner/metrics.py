"""Per-round metrics: one JSON object per line in ``metrics.jsonl`` (appended, flushed each round),
and a one-line summary for logs."""

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import IO

from ftis.node.runner.node import RoundReport


def report_record(report: RoundReport) -> dict[str, object]:
    """A flat, JSON-ready record of one round."""
    step = asdict(report.step)
    transport = report.transport
    return {
        "round": report.round,
        "own_reward": report.own_reward,
        "peer_reward": report.peer_reward,
        "own_groups": report.own_groups,
        "peer_groups_received": report.peer_groups_received,
        "peer_groups_used": report.peer_groups_used,
        "peer_groups_by_peer": report.peer_groups_by_peer,
        "unusable_groups": report.unusable_groups,
        "generation_tokens": report.generation_tokens,
        "generation_tokens_per_s": report.generation_tokens / report.generation_seconds
        if report.generation_seconds > 0 else 0.0,
        **{f"train_{key}": value for key, value in step.items()},
        "train_tokens_per_s": report.step.tokens_per_s,
        "bytes_sent": transport.published_bytes,
        "bytes_received": transport.delivered_bytes,
        "rejections": {f"{peer}:{reason}": count for (peer, reason), count in transport.rejections.items()},
    }


class MetricsLog:
    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "metrics.jsonl"
        self._file: IO[str] = self.path.open("a", encoding="utf-8")

    def write(self, report: RoundReport) -> None:
        record = {key: _json_number(value) for key, value in report_record(report).items()}
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _json_number(value: object) -> object:
    """NaN (no peer groups this round) and infinities are not JSON: they are written as null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def summary_line(report: RoundReport) -> str:
    step = report.step
    peer = "-" if math.isnan(report.peer_reward) else f"{report.peer_reward:.2f}"
    trained = (f"loss {step.loss:+.4f} filtered {step.filtered_fraction:.0%} IS {step.is_weight_mean:.2f}"
               f"/{step.is_weight_max:.2f}" if step.trained else "no step (no reward variance)")
    return (f"round {report.round:>5}  v{step.policy_version:<5} reward own {report.own_reward:.2f} peer {peer}  "
            f"groups own {report.own_groups} peer {report.peer_groups_used}/{report.peer_groups_received}  "
            f"{trained}  gen {report.generation_tokens} tok  train {step.tokens} tok  "
            f"rx {report.transport.delivered_bytes} B  rejected {sum(report.transport.rejections.values())}")
