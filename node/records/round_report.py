"""A round's figures, declared once: a new round-level metric is one field of ``RoundReport`` below, made
with ``figure(...)`` (``node/figures.py``), and its value set where the round computes it (``runner/node.py``).

From its declaration alone a round figure ``x`` becomes the key ``x`` of every ``metrics.jsonl`` record, in
field order (``records/metrics.py``; docs/node.md lists them), the TensorBoard scalar ``tag`` when it has one,
and a part of the terminal's summary line and a column of its table when ``shown`` (``records/display.py``).
The training step's figures are a section of it (``StepFigures``, keys ``train_<name>``), and so are the
swarm's (``SwarmFigures``: traffic, rejections, scores) and the backend's counters (``generator_<name>``).

A record's size does not grow with the number of peers: what it holds per peer is bounded by a step's peer
groups (``peer_groups_by_peer``, the step's ``train_filtered_by_peer``); the tables of every peer (scores, mutes,
rejections and use by peer) are summed up here as counts, and kept whole, up to a bound, in ``peers.json``
(``records/peer_tables.py``).

``Node.run_round`` fills in what the round measures; the run loop fills in the rest when it records the
round (``metrics.report_record``): the evaluation's accuracy, the swarm's figures since its previous record,
the seconds alone and its share of the loop's wall time.

Rewards are binary (1: right format and answer), so a mean reward is an accuracy: ``own_reward`` is this
node's sampling accuracy, ``peer_reward`` the accuracy this node grants its peers' completions when it
scores them with its own task.
"""

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ftis.node.figures import figure
from ftis.node.swarm.peers.reputation import PeerScore
from ftis.node.swarm.transport import TransportStats
from ftis.node.trainer.step_figures import RECORD_PREFIX, StepFigures

NAN = float("nan")
# a node that has seen no peer for this long trains alone: the run loop warns (runner/alone.py), the display says ALONE
ALONE_AFTER_S = 60.0


@dataclass(frozen=True)
class SwarmFigures:
    """The swarm as one record sees it: traffic and rejections since the previous record, and totals."""

    bytes_sent: int = figure(0, tag="swarm/bytes_sent")
    bytes_received: int = figure(0, tag="swarm/bytes_received")
    batches_sent: int = figure(0)
    batches_received: int = figure(0, tag="swarm/batches_received")
    bytes_sent_total: int = figure(0, tag="swarm/bytes_sent_total")
    bytes_received_total: int = figure(0, tag="swarm/bytes_received_total")
    rejections: dict[str, int] = figure(factory=dict, tag="rejections", total="rejections/all")  # by reason
    rejections_total: dict[str, int] = figure(factory=dict)  # ...since the start
    peers_rejected: int = figure(0, tag="peers/rejected")  # peers with a rejection since the start (those tracked)
    # the peers this node judges (reputation.py): how many, the lowest and the mean score (NaN: none), how many muted
    peers_scored: int = figure(0, tag="peers/scored")
    peer_score_min: float = figure(NAN, tag="peers/score_min")
    peer_score_mean: float = figure(NAN, tag="peers/score_mean")
    peers_muted: int = figure(0, tag="peers/muted")
    announce_failures_total: int = figure(0, tag="swarm/announce_failures_total")
    poll_failures_total: int = figure(0, tag="swarm/poll_failures_total")
    serves_turned_away_total: int = figure(0, tag="swarm/serves_turned_away_total")
    # how peers reach this node (protocol.limits.REACH_HOW), and what crossed relays (docs/nat.md)
    reach: str = figure("unknown")
    relayed_bytes_received_total: int = figure(0, tag="relay/bytes_received_total")  # payloads fetched via relays
    relayed_bytes_sent_total: int = figure(0, tag="relay/bytes_sent_total")  # ...served via relays
    relay_failures_total: int = figure(0, tag="relay/failures_total")  # relay slots refused or lost (libp2p's count)
    relay_service_bytes_total: int = figure(0, tag="relay/service_bytes_total")  # carried for others, when it relays

    @classmethod
    def between(cls, now: TransportStats, before: TransportStats | None,
                scores: Mapping[str, PeerScore]) -> "SwarmFigures":
        """The figures of ``now``, counted since ``before`` (None: since the start) where per record."""
        before = before or TransportStats()
        judged = [peer.score for peer in scores.values()]
        return cls(
            bytes_sent=now.published_bytes - before.published_bytes,
            bytes_received=now.delivered_bytes - before.delivered_bytes,
            batches_sent=now.published_batches - before.published_batches,
            batches_received=now.delivered_batches - before.delivered_batches,
            bytes_sent_total=now.published_bytes,
            bytes_received_total=now.delivered_bytes,
            rejections=_by_reason(now.rejections, before.rejections),
            rejections_total=_by_reason(now.rejections, {}),
            peers_rejected=len({peer for (peer, _), count in now.rejections.items() if count}),
            peers_scored=len(judged),
            peer_score_min=min(judged, default=NAN),
            peer_score_mean=sum(judged) / len(judged) if judged else NAN,
            peers_muted=sum(peer.muted_until is not None for peer in scores.values()),
            announce_failures_total=now.announce_failures,
            poll_failures_total=now.poll_failures,
            serves_turned_away_total=now.serves_turned_away,
            reach=now.reach,
            relayed_bytes_received_total=now.relayed_received_bytes,
            relayed_bytes_sent_total=now.relayed_sent_bytes,
            relay_failures_total=now.relay.slot_failures + now.relay.slots_lost if now.relay else 0,
            relay_service_bytes_total=now.relay.relayed_bytes if now.relay else 0,
        )


@dataclass(frozen=True, kw_only=True)
class RoundReport:
    """One round's figures, in the order of the record's keys; the fields made without ``figure`` are not in it."""

    round: int = figure(0, shown=True)
    time: float = figure(factory=time.time)  # when the round was recorded
    # mean reward of this node's own completions, and the mean reward it gave its peers' (nan when none arrived)
    own_reward: float = figure(NAN, tag="reward/own", shown=True)
    peer_reward: float = figure(NAN, tag="reward/peer", shown=True)
    # held-out accuracy, when the round evaluated
    eval_accuracy: float | None = figure(None, tag="eval/accuracy", shown=True)
    own_groups: int = figure(0, tag="groups/own", shown=True)
    peer_groups_received: int = figure(0, tag="groups/peer_received", shown=True)
    peer_groups_used: int = figure(0, tag="groups/peer_used", shown=True)
    peer_groups_by_peer: dict[str, int] = figure(factory=dict, tag="groups/peer", shown=True)
    unusable_groups: int = figure(0, tag="groups/unusable")
    # peers' groups not scored: past the step's budget, or once its time for scoring was spent (intake/admission.py)
    unscored_groups: int = figure(0, tag="groups/unscored")
    # right answers whose reward was 0 for a false equation on the way (``[task] check_steps``, tasks/steps.py)
    own_false_steps: int = figure(0, tag="completions/own_false_steps")
    peer_false_steps: int = figure(0, tag="completions/peer_false_steps")
    # the peers by how this node last trained on their groups (``peer_use``), made here: form -> peers
    peers_by_use: dict[str, int] = figure(factory=dict, init=False, tag="peers/use")
    generation_tokens: int = figure(0)
    generation_seconds: float = figure()
    # generation_tokens / generation_seconds, made here from those two (not passed)
    generation_tokens_per_s: float = figure(init=False, tag="throughput/generation_tokens_per_s", shown=True)
    waited_seconds: float = figure(tag="loop/waited_seconds")  # rounds mode: waiting for peers' batches (0 async)
    late_peers: int = figure(0, tag="loop/late_peers")  # rounds mode: live peers whose batch missed the deadline
    merged_groups: int = figure(0, tag="horizontal/merged_groups")  # advantage groups from several nodes' groups
    merged_group_size: float = figure(NAN, tag="horizontal/merged_group_size")  # ...their mean completions
    # ...peers' groups with a shared prompt's id but another task or prompt: kept apart
    mismatched_groups: int = figure(0, tag="horizontal/mismatched_groups")
    # the backend's own counters (vLLM: weight syncs...)
    generator: dict[str, object] = figure(factory=dict, prefix="generator_", tag="generator")
    step: StepFigures = figure(factory=StepFigures, prefix=RECORD_PREFIX)
    swarm: SwarmFigures = figure(factory=SwarmFigures, prefix="")  # filled in when recorded (report_record)
    # since the node last saw a peer (runner/alone.py)
    alone_seconds: float = figure(tag="swarm/alone_seconds", shown=True)
    # the round's share of the run loop's wall time (utilisation.py), when the run loop measured it
    loop_seconds: float | None = figure(None, tag="loop/seconds", optional=True)
    utilisation: float | None = figure(None, tag="loop/utilisation", optional=True)
    loop_parts: dict[str, float] = figure(factory=dict, prefix="loop_", tag="loop")  # "<part>_seconds"
    transport: TransportStats = field(default_factory=TransportStats, repr=False)  # since the start
    seconds: dict[str, float] = field(default_factory=dict)  # wall seconds of the round's parts (utilisation.py)
    scores: dict[str, PeerScore] = field(default_factory=dict)  # peers as this node judges them (reputation.py)
    # how this node last trained on each peer's groups (the newest peers, intake.py): "token" (its ids), "sequence"
    # (another tokenizer: its texts in this node's tokens) or "none" (nothing usable: no task of this node's...)
    peer_use: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        speed = self.generation_tokens / self.generation_seconds if self.generation_seconds > 0 else 0.0
        object.__setattr__(self, "generation_tokens_per_s", speed)
        by_use: dict[str, int] = {}
        for form in self.peer_use.values():
            by_use[form] = by_use.get(form, 0) + 1
        object.__setattr__(self, "peers_by_use", dict(sorted(by_use.items())))


def _by_reason(now: Mapping[tuple[str, str], int], before: Mapping[tuple[str, str], int]) -> dict[str, int]:
    """Rejections counted since ``before``, summed over peers; reasons with none are left out."""
    counts: dict[str, int] = {}
    for (peer, reason), count in now.items():
        new = count - before.get((peer, reason), 0)
        if new:
            counts[reason] = counts.get(reason, 0) + new
    return dict(sorted(counts.items()))


def rejections_by_peer(rejections: Mapping[tuple[str, str], int]) -> dict[str, dict[str, int]]:
    """The transport's rejections (``TransportStats.rejections``) as peer -> reason -> count."""
    peers: dict[str, dict[str, int]] = {}
    for (peer, reason), count in sorted(rejections.items()):
        peers.setdefault(peer, {})[reason] = count
    return peers
