"""``ftis-node status`` (``swarm_status``): the run's members read as a light client, and the members table it
prints, with a node's scores and mutes when given its view. What members wrote of themselves (peer id, model,
adapter, relays) is shown through ``printable``: a terminal sees no control, bidi or zero-width character of
theirs, and no string longer than ``MAX_SHOWN_CHARS``."""

import json
import shutil
import tempfile
import time
from pathlib import Path

from ftis.node.config import SwarmConfig
from ftis.node.printable import printable
from ftis.node.swarm.errors import SwarmError
from ftis.node.swarm.exchange.reasons import TOKENIZER
from ftis.node.swarm.peers.peer_view import PeerView, muted_now
from ftis.node.swarm.transport import Member

READ_TIMEOUT_S = 60.0  # reading the run's announcements: a DHT that does not answer is an error


def swarm_status(config: SwarmConfig, *, node: Path | None = None, all_shards: bool = False,
                 as_json: bool = False) -> str:
    """``ftis-node status``: the run's members read by a light client with ``config`` (it announces nothing), as
    a table with the reading's summary, or JSON; ``node`` (a running node's folder) adds its score of each member
    and its mutes. ``SwarmError`` when the DHT does not answer within ``READ_TIMEOUT_S``."""
    from ftis.node.swarm.dht.directory import READER_SHARDS, read_members
    from ftis.node.swarm.dht.transport import start_dht
    from ftis.node.swarm.peers.peer_view import read_peer_view

    view = read_peer_view(node) if node is not None else None  # before joining: a wrong folder fails at once
    scratch = Path(tempfile.mkdtemp(prefix="ftis-status-"))
    try:
        dht, _ = start_dht(config, scratch / "identity.key", announce=False)
        try:
            reading = read_members(dht, config.run_id, config.shards, timeout=READ_TIMEOUT_S,
                                   sample=0 if all_shards else READER_SHARDS)
        finally:
            dht.shutdown()
    except TimeoutError:
        raise SwarmError(f"the swarm's DHT did not answer within {READ_TIMEOUT_S:.0f} s; try again") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if as_json:
        rows = [dict(member.__dict__) for member in reading.members]
        if view is not None:  # the node's judgement of each member; null where it has none
            for row in rows:
                score = view.scores.get(row["peer_id"])
                row |= {"score": None if score is None else score.score,
                        "muted_until": None if score is None else score.muted_until}
        return json.dumps(rows, indent=2)
    summary = reading.summary() + ("" if view is None or not view.directory else f"; the node's {view.directory}")
    return members_table(reading.members, config.run_id, view=view) + "\n" + summary


def members_table(members: list[Member], run_id: str, now: float | None = None, view: PeerView | None = None) -> str:
    """One row per member; ``view`` (a node's ``peers.json``) adds its score of each member, whether it mutes it
    and how it trains on the member's groups (``used``); "-" for a member the node has no record of, such as itself."""
    now = time.time() if now is None else now
    if not members:
        return f"run {run_id!r}: no members are announcing" + ("" if view is None else "\n" + dht_line(view))
    header = ("peer id", "model", "adapter", "policy", "batches", "tokens", "last seen", "reached")
    rows = [
        (printable(m.peer_id), printable(m.model), printable(m.adapter), str(m.policy_version),
         str(m.published_batches), str(m.published_tokens), f"{max(0.0, now - m.last_seen):.0f} s ago", reached(m))
        for m in members
    ]
    lines = [f"run {run_id!r}: {len(members)} member{'s' if len(members) != 1 else ''}"]
    if view is not None:
        header += ("score", "muted", "used")
        rows = [(*row, *_judgement(view, m.peer_id, now)) for row, m in zip(rows, members, strict=True)]
        lines.append(f"scores: the node's view of round {view.round}, {max(0.0, now - view.time):.0f} s ago"
                     + (f" ({view.left_out} more peers it keeps records of are not in peers.json)"
                        if view.left_out else ""))
        lines.append(dht_line(view))
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
              for row in [header, *rows]]
    return "\n".join(lines)


def reached(member: Member) -> str:
    """How the member says peers reach it: "direct", "relay <relay id>" (and how many more), "private" (only from
    its own network), "unreachable" (client mode: its batches are not fetched), or "?" (not said yet, or an older
    node that does not say); printable (``printable``)."""
    if member.reach == "relayed" and member.relays:
        more = f" +{len(member.relays) - 1}" if len(member.relays) > 1 else ""
        return f"relay {printable(member.relays[0][:16])}…{more}"
    return "?" if member.reach == "unknown" else printable(member.reach)


def _judgement(view: PeerView, peer_id: str, now: float) -> tuple[str, str, str]:
    score = view.scores.get(peer_id)
    used = used_as(view, peer_id)
    if score is None:
        return "-", "-", used
    muted = f"{score.muted_until - now:.0f} s more" if muted_now(score, now) else "no"
    return f"{score.score:.2f}", muted, used


USE_TEXT = {"token": "per token", "sequence": "per sequence", "none": "no"}


def used_as(view: PeerView, peer_id: str) -> str:
    """How the node trains on the member's groups: "per token" (its tokenizer), "per sequence" (another
    tokenizer's texts), "no" (nothing usable arrived), "no: other tokenizer" (the node skips those), or "-"."""
    if view.rejections.get(peer_id, {}).get(TOKENIZER):
        return "no: other tokenizer"
    return USE_TEXT.get(view.use.get(peer_id, ""), "-")


def dht_line(view: PeerView) -> str:
    """What the node counted of its own contact with the swarm."""
    line = (f"the node: {view.announce_failures} failed announcements and {view.poll_failures} failed reads of "
            "the DHT since it started")
    if view.alone_seconds >= 60:
        line += f"; NO PEER SEEN FOR {view.alone_seconds:.0f} s: it trains alone"
    return line
