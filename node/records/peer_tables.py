"""The per-peer tables a round leaves (each peer's score and mute, its rejections by reason, how its groups were
used), cut to the ``MAX_PEERS_KEPT`` peers that tell most, for ``DIR/peers.json`` (``swarm/peers/peer_view.py``).

A node keeps records of up to thousands of peers (``swarm/peers/reputation.py``: 8,192 scores; the inbox and the intake:
4,096 peers' rejections and uses), and a swarm of Sybils fills them; ``metrics.jsonl`` holds their counts only
(``round_report.py``), and ``peers.json``, replaced every round, holds these tables for at most ``MAX_PEERS_KEPT``
peers, with the count of those left out:

    view = round_peer_view(report, time=record["time"], alone_s=12.0, directory="directory: ...")

Kept first: the peers this round trained on, then those with the most evidence (``PeerScore.evidence``, which
fades with its half-life: the peers heard from most, and most lately), then those with the most rejections.
"""

from collections.abc import Mapping
from typing import Any

from ftis.node.records.round_report import RoundReport, rejections_by_peer
from ftis.node.swarm.peers.peer_view import PeerView
from ftis.node.swarm.peers.reputation import PeerScore

MAX_PEERS_KEPT = 1024  # peers.json: about 150 KB at most


def round_peer_view(report: RoundReport, time: float, alone_s: float, directory: str,
                    max_peers: int = MAX_PEERS_KEPT) -> PeerView:
    """The round's view of its peers for ``peers.json``: the tables of the ``max_peers`` peers that tell most."""
    rejections = rejections_by_peer(report.transport.rejections)
    known = report.scores.keys() | rejections.keys() | report.peer_use.keys()
    kept = set(kept_peers(known, report.peer_groups_by_peer, report.scores, rejections, max_peers))

    def of_kept(table: Mapping[str, Any]) -> dict[str, Any]:
        return {peer: entry for peer, entry in table.items() if peer in kept}

    return PeerView(time, report.round, of_kept(report.scores), of_kept(rejections),
                    announce_failures=report.transport.announce_failures,
                    poll_failures=report.transport.poll_failures, alone_seconds=alone_s, directory=directory,
                    use=of_kept(report.peer_use), left_out=len(known) - len(kept))


def kept_peers(known: set[str], trained_on: Mapping[str, int], scores: Mapping[str, PeerScore],
               rejections: Mapping[str, Mapping[str, int]], max_peers: int) -> list[str]:
    """At most ``max_peers`` of ``known``, those that tell most first (see the module docstring)."""
    def telling(peer: str) -> tuple[bool, float, int, str]:
        score = scores.get(peer)
        return (peer in trained_on, 0.0 if score is None else score.evidence,
                sum(rejections.get(peer, {}).values()), peer)

    return sorted(known, key=telling, reverse=True)[:max_peers]
