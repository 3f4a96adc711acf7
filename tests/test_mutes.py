"""Each new mute is said, with its likely reason (``node/runner/mutes.py``).

Run: python -m pytest tests/test_mutes.py -q
"""

from ftis.node.runner.mutes import MuteWatch
from ftis.node.swarm.peers.reputation import PeerScore


def score(muted_until: float | None) -> PeerScore:
    return PeerScore(score=0.2, good=1.0, bad=4.0, muted_until=muted_until, mutes=1 if muted_until else 0)


def test_a_new_mute_is_said_once_with_its_refusals_or_the_filter_and_g():
    watch = MuteWatch()
    assert watch.check({"a": score(None)}, {}, now=100.0, threshold=1.0) == []
    lines = watch.check({"a": score(400.0), "b": score(400.0)}, {"b": {"hash_mismatch": 3, "stale": 9}},
                        now=100.0, threshold=1.0)
    assert len(lines) == 2
    assert lines[0].startswith("peer a muted for 300 s (score 0.20)") and "D > g = 1" in lines[0]
    assert "divergence_threshold" in lines[0] and "mute_below = 0" in lines[0]
    assert "refused (hash_mismatch 3)" in lines[1]  # a stale batch says nothing about the peer
    assert watch.check({"a": score(400.0), "b": score(400.0)}, {}, now=101.0, threshold=1.0) == []  # said once
    assert watch.check({"a": score(None)}, {}, now=500.0, threshold=1.0) == []
    assert len(watch.check({"a": score(900.0)}, {}, now=600.0, threshold=1.0)) == 1  # muted again: said again
