"""The members table ``ftis-node status`` prints."""

import time

from ftis.node.swarm.transport import Member


def members_table(members: list[Member], run_id: str, now: float | None = None) -> str:
    now = time.time() if now is None else now
    if not members:
        return f"run {run_id!r}: no members are announcing"
    header = ("peer id", "model", "adapter", "policy", "batches", "tokens", "last seen")
    rows = [
        (m.peer_id, m.model, m.adapter, str(m.policy_version), str(m.published_batches), str(m.published_tokens),
         f"{max(0.0, now - m.last_seen):.0f} s ago")
        for m in members
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [f"run {run_id!r}: {len(members)} member{'s' if len(members) != 1 else ''}"]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
              for row in [header, *rows]]
    return "\n".join(lines)
