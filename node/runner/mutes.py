"""Saying when a peer gets muted, and why it probably was.

Muting is silent in the transport; a muted peer's batches are refused unfetched. A node whose peers all
get muted trains on its own samples only, which looks like the swarm working. Most often that is right
(a forger, a flood), but a small divergence threshold g filters an honest peer of another model too,
and more than ~58% of its completions filtered mutes it (``swarm/peers/reputation.py``). ``MuteWatch.check``
turns each new mute into one line that says which: the peer's refusals when it has some, else the
divergence filter, with g and the settings that change it.
"""

from dataclasses import dataclass, field

from ftis.node.printable import printable
from ftis.node.swarm.exchange.reasons import PEER_FAULTS
from ftis.node.swarm.peers.reputation import PeerScore


@dataclass
class MuteWatch:
    _muted: set[str] = field(default_factory=set)

    def check(self, scores: dict[str, PeerScore], rejections: dict[str, dict[str, int]], now: float,
              threshold: float) -> list[str]:
        """One warning per peer muted since the last call; ``rejections``: by peer and reason, ``threshold``: g."""
        muted = {peer for peer, score in scores.items() if score.muted_until is not None}
        lines = []
        for peer in sorted(muted - self._muted):
            score = scores[peer]
            faults = {reason: n for reason, n in rejections.get(peer, {}).items() if reason in PEER_FAULTS}
            why = (f"its batches were refused ({', '.join(f'{r} {n}' for r, n in sorted(faults.items()))})"
                   if faults else
                   f"most of its completions were divergence-filtered (D > g = {threshold:g}); an honest peer "
                   "of another model is, under a small g: raise loss.divergence_threshold, or set "
                   "swarm.mute_below = 0 to never mute")
            lines.append(f"peer {printable(peer)} muted for {score.muted_until - now:.0f} s "
                         f"(score {score.score:.2f}): {why}")
        self._muted = muted
        return lines
