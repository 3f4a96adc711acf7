"""Hand-built step reports for the metrics and display tests."""

from ftis.node.runner.round_report import RoundReport
from ftis.node.swarm.transport import TransportStats
from ftis.node.trainer.step_metrics import StepMetrics

PEER_A, PEER_B = "12D3KooWAlphaAlphaAlphaAlpha", "12D3KooWBravoBravoBravoBravo"


def step_metrics(trained: bool = True, version: int = 3) -> StepMetrics:
    return StepMetrics(
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
        step=step_metrics(trained), transport=transport or TransportStats(),
    )


BEFORE = TransportStats(published_batches=4, published_bytes=1000, delivered_batches=7, delivered_bytes=5000,
                        rejections={(PEER_A, "stale"): 2, (PEER_B, "quota"): 1})
AFTER = TransportStats(published_batches=5, published_bytes=1600, delivered_batches=9, delivered_bytes=9096,
                       rejections={(PEER_A, "stale"): 3, (PEER_B, "quota"): 1, (PEER_B, "stale"): 2,
                                   (PEER_B, "hash"): 1})
