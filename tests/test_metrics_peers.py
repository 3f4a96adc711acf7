"""A swarm of 5,000 peers (a Sybil swarm's worth: each refused for several reasons, each scored, half of them
muted, 4,096 with a use) against what a node writes each round: every ``metrics.jsonl`` line stays as small as
with two peers (the peers as counts, never a table of them), and ``peers.json`` holds the tables of at most
``MAX_PEERS_KEPT`` peers, the ones that tell most, with the count of those left out.

Run: python -m pytest tests/test_metrics_peers.py -q   (a few seconds)
"""

import json
from dataclasses import replace

from helpers.metrics_fakes import AFTER, BEFORE, PEER_A, PEER_B, report

from ftis.node.config import MetricsConfig
from ftis.node.records.metrics import RunMetrics
from ftis.node.swarm.peers.reputation import PeerScore
from ftis.node.swarm.transport import TransportStats

PEERS = 5_000
LINE_BOUND = 4096  # bytes of a line here: its per-peer parts are the step's (2 peers), whatever the swarm's size
KEPT = 1024  # records/peer_tables.py's MAX_PEERS_KEPT
NOW = 1_700_000_000.0


def sybil(i: int) -> str:
    return f"12D3KooWSybil{i:05d}" + "x" * 39  # as long as a libp2p peer id


def swarm_report(peers: int):
    """A round that trained on PEER_A's and PEER_B's groups, with ``peers`` more peers refused and judged."""
    rejections = dict(AFTER.rejections)
    scores = {PEER_A: PeerScore(0.95, 18.0, 0.5, None, 0), PEER_B: PeerScore(0.9, 12.0, 1.0, None, 0)}
    for i in range(peers):
        rejections |= {(sybil(i), "hash_mismatch"): 3 + i % 7, (sybil(i), "stale"): 1, (sybil(i), "decode_error"): 2}
        scores[sybil(i)] = PeerScore(0.1 + i / peers / 2, good=0.5, bad=1.0 + i / peers,
                                     muted_until=NOW + 600 if i % 2 else None, mutes=i % 2)
    use = {sybil(i): "none" for i in range(min(peers, 4094))} | {PEER_A: "token", PEER_B: "sequence"}
    transport = TransportStats(**{**AFTER.__dict__, "rejections": rejections})
    return replace(report(4, transport=transport), scores=scores, peer_use=use)


def record_lines(folder, peers: int) -> list[str]:
    metrics = RunMetrics(folder, MetricsConfig(display="lines", tensorboard=False), lambda line: None)
    try:
        metrics.record(report(3, transport=BEFORE))
        metrics.record(swarm_report(peers))
    finally:
        metrics.close()
    return (folder / "metrics.jsonl").read_text().splitlines()


def test_a_metrics_line_does_not_grow_with_the_peers(tmp_path):
    few = record_lines(tmp_path / "few", peers=10)[1]  # refused for the same reasons
    many = record_lines(tmp_path / "many", peers=PEERS)[1]
    assert len(many.encode()) < LINE_BOUND, f"{len(many.encode())} bytes with {PEERS + 2} peers"
    assert len(many) - len(few) < 64, (len(few), len(many))  # the counts' digits, no more
    assert not any(sybil(1) in line for line in (few, many))


def test_peers_json_holds_the_tables_of_a_bounded_number_of_peers(tmp_path):
    record_lines(tmp_path, peers=PEERS)
    text = (tmp_path / "peers.json").read_text()
    view = json.loads(text)
    assert len(view["peers"]) <= KEPT and len(text.encode()) < 400_000, (len(view["peers"]), len(text))
    assert {PEER_A, PEER_B} <= view["peers"].keys()  # trained on this round: always kept
    assert view["peers"][PEER_A]["use"] == "token" and view["peers"][sybil(PEERS - 1)]["rejections"]["stale"] == 1
    kept_sybils = sorted(peer for peer in view["peers"] if peer.startswith("12D3KooWSybil"))
    assert kept_sybils == [sybil(i) for i in range(PEERS - KEPT + 2, PEERS)]  # the most evidence
    assert view["left_out"] == PEERS + 2 - KEPT
