"""A running node's view of its peers, in a small JSON file in its folder: ``DIR/peers.json``.

``ftis-node status`` reads the swarm as a light client of its own, so it cannot see what a node thinks
of its peers; the node writes it down after every step instead, and ``ftis-node status --node DIR``
adds it to the members table. The file is replaced atomically (``atomic.write_atomic``), so a reader
sees the last step's view or the one before, never half of one:

    {"time": unix seconds of the step, "round": 12,
     "peers": {peer id: {"score": 0.93, "good": 11.2, "bad": 0.8, "muted_until": null, "mutes": 0,
                         "rejections": {reason: count since the node started}, "use": "token"}},
     "dht": {"announce_failures": 0, "poll_failures": 0, "alone_seconds": 0.0},
     "directory": "directory: 625 shards, 2 read per poll, ...", "left_out": 0}

``peers`` holds a bounded number of peers, those that tell most (``records/peer_tables.py``); ``left_out``: how
many more the node keeps records of (absent in an older node's file: 0).

``dht``: the node's failed announcements and reads of the DHT since it started, and the seconds since it
last saw a peer (absent in a file an older node wrote: read as zeros). ``directory``: how the node reads the
swarm (``SwarmConfig.sampling_line``; absent in an older file: empty).

``muted_until`` is unix seconds while the peer is muted, else null. ``use``: how the node last trained on the
peer's groups: "token" (same tokenizer), "sequence" (another tokenizer: its texts, one weight per completion) or
"none" (nothing usable); absent for a peer it never received a batch from, and in an older node's file.
"""

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ftis.node.atomic import write_atomic
from ftis.node.errors import UserError
from ftis.node.swarm.peers.reputation import PeerScore

PEER_VIEW_FILE = "peers.json"


class PeerViewError(UserError, RuntimeError):
    """A node folder without a readable peer view; the message says why."""


@dataclass(frozen=True)
class PeerView:
    time: float  # unix seconds of the step that wrote it
    round: int
    scores: dict[str, PeerScore]
    rejections: dict[str, dict[str, int]]  # peer id -> reason -> count since the node started
    announce_failures: int = 0  # failed announcements since the node started
    poll_failures: int = 0  # failed reads of the peers' announcements
    alone_seconds: float = 0.0  # since the node last saw a peer
    directory: str = ""  # how the node reads the swarm: shards, read per poll, fetch budget
    use: dict[str, str] = field(default_factory=dict)  # peer id -> "token", "sequence" or "none"
    left_out: int = 0  # peers the node keeps records of beyond those in the view


def write_peer_view(folder: Path, view: PeerView) -> Path:
    peers = {
        peer: {"score": s.score, "good": s.good, "bad": s.bad, "muted_until": s.muted_until, "mutes": s.mutes,
               "rejections": dict(view.rejections.get(peer, {}))}
        for peer, s in view.scores.items()
    }
    for peer in view.rejections.keys() - view.scores.keys():  # refused only for reasons that are no evidence
        peers[peer] = {"rejections": dict(view.rejections[peer])}
    for peer, form in view.use.items():
        peers.setdefault(peer, {"rejections": {}})["use"] = form
    data = {"time": view.time, "round": view.round, "peers": dict(sorted(peers.items())),
            "dht": {"announce_failures": view.announce_failures, "poll_failures": view.poll_failures,
                    "alone_seconds": view.alone_seconds}, "directory": view.directory, "left_out": view.left_out}
    return write_atomic(folder / PEER_VIEW_FILE, json.dumps(data, indent=1, allow_nan=False) + "\n")


def read_peer_view(folder: Path) -> PeerView:
    """The view a node last wrote into ``folder``; ``PeerViewError`` if there is none or it is damaged."""
    path = folder / PEER_VIEW_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        scores, rejections, use = {}, {}, {}
        for peer, entry in data["peers"].items():
            rejections[peer] = {str(reason): int(count) for reason, count in entry["rejections"].items()}
            if "use" in entry:
                use[peer] = str(entry["use"])
            if "score" in entry:
                until = entry["muted_until"]
                scores[peer] = PeerScore(score=float(entry["score"]), good=float(entry["good"]),
                                         bad=float(entry["bad"]), muted_until=None if until is None else float(until),
                                         mutes=int(entry["mutes"]))
        dht = data.get("dht", {})
        view = PeerView(time=float(data["time"]), round=int(data["round"]), scores=scores, rejections=rejections,
                        announce_failures=int(dht.get("announce_failures", 0)),
                        poll_failures=int(dht.get("poll_failures", 0)),
                        alone_seconds=float(dht.get("alone_seconds", 0.0)),
                        directory=str(data.get("directory", "")), use=use, left_out=int(data.get("left_out", 0)))
    except FileNotFoundError:
        raise PeerViewError(f"{path} does not exist: is a node running with --out {folder}?") from None
    except OSError as error:
        raise PeerViewError(f"{path}: cannot read ({error.strerror})") from None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise PeerViewError(f"{path}: not a peer view ({type(error).__name__}: {error})") from None
    if not math.isfinite(view.time):
        raise PeerViewError(f"{path}: not a peer view (time {view.time})")
    return view


def muted_now(score: PeerScore, now: float) -> bool:
    return score.muted_until is not None and score.muted_until > now
