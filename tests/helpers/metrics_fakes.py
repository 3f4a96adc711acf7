"""Hand-built step reports for the metrics and display tests, and a node's folder made of them (the dashboard's
tests)."""

import math
import time
from dataclasses import replace
from pathlib import Path

from ftis.node.evaluation.evaluation import EvalResult
from ftis.node.evaluation.periodic_eval import eval_record
from ftis.node.records.metrics import MetricsLog, report_record
from ftis.node.records.round_report import RoundReport
from ftis.node.swarm.peers.peer_view import PeerView, write_peer_view
from ftis.node.swarm.peers.reputation import PeerScore
from ftis.node.swarm.transport import TransportStats
from ftis.node.trainer.step_figures import StepFigures

PEER_A, PEER_B = "12D3KooWAlphaAlphaAlphaAlpha", "12D3KooWBravoBravoBravoBravo"


def step_figures(trained: bool = True, version: int = 3) -> StepFigures:
    return StepFigures(
        trained=trained, policy_version=version, loss=-0.0123, grad_norm=0.8, groups=5, peer_groups=3,
        zero_variance_groups=2, sequences=40, tokens=1200, filtered_fraction=0.25,
        filtered_advantage_fraction=0.2, filtered_divergence_fraction=0.05, is_weight_mean=1.02,
        is_weight_max=1.98, truncated_fraction=0.01, divergence_mean=0.12, seconds=2.0,
    )


def report(round_: int = 4, transport: TransportStats | None = None, peer_reward: float = 0.375,
           trained: bool = True) -> RoundReport:
    return RoundReport(
        round=round_, own_reward=0.25, peer_reward=peer_reward, own_groups=2, peer_groups_received=6,
        peer_groups_used=3, peer_groups_by_peer={PEER_A: 2, PEER_B: 1}, unusable_groups=1,
        generation_tokens=500, generation_seconds=4.0, waited_seconds=0.0, late_peers=0,
        step=step_figures(trained), transport=transport or TransportStats(),
    )


BEFORE = TransportStats(published_batches=4, published_bytes=1000, delivered_batches=7, delivered_bytes=5000,
                        rejections={(PEER_A, "stale"): 2, (PEER_B, "quota"): 1})
AFTER = TransportStats(published_batches=5, published_bytes=1600, delivered_batches=9, delivered_bytes=9096,
                       rejections={(PEER_A, "stale"): 3, (PEER_B, "quota"): 1, (PEER_B, "stale"): 2,
                                   (PEER_B, "hash"): 1})


def write_node_folder(folder: Path, rounds: int, *, muted: str = PEER_B, evaluate_every: int = 5) -> Path:
    """A node's folder as a run leaves it, written by the node's own writers: ``metrics.jsonl`` (a step record per
    round whose figures move a little from round to round, an evaluation record every ``evaluate_every`` rounds)
    and ``peers.json`` (PEER_A in good standing, ``muted`` muted for ten minutes)."""
    log = MetricsLog(folder)
    previous = None
    for r in range(rounds):
        wave = 0.5 + 0.5 * math.sin(r / 3)
        accuracy = None
        if r % evaluate_every == 0:
            accuracy = 0.3 + 0.3 * r / max(rounds, 1)
            log.write(eval_record(EvalResult("arith", "test", 100, round(100 * accuracy), accuracy, 1.0, 0.0, 3.0,
                                             1000.0, 0.1), r, r))
        transport = TransportStats(published_batches=r + 1, published_bytes=900 * (r + 1),
                                   delivered_batches=2 * (r + 1), delivered_bytes=int(1800 * (r + 1) + 400 * r * wave))
        step = replace(step_figures(version=r + 1), filtered_fraction=0.3 + 0.1 * wave,
                       filtered_advantage_fraction=0.25 + 0.1 * wave, filtered_divergence_fraction=0.05 * wave,
                       is_weight_mean=0.9 + 0.05 * wave)
        round_report = replace(report(r, transport), own_reward=0.2 + 0.2 * wave + 0.2 * r / rounds,
                               peer_reward=0.3 + 0.1 * wave, step=step, utilisation=0.4 + 0.3 * wave,
                               loop_seconds=1.0)
        log.write(report_record(round_report, previous, eval_accuracy=accuracy))
        previous = transport
    log.close()
    now = time.time()
    write_peer_view(folder, PeerView(now, rounds - 1, {
        PEER_A: PeerScore(score=0.9, good=12.0, bad=1.0, muted_until=None, mutes=0),
        muted: PeerScore(score=0.2, good=1.0, bad=9.0, muted_until=now + 600, mutes=1),
    }, {muted: {"hash": 3}}))
    return folder
