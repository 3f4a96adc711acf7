"""The stream exchange of a payload between a fetcher (``fetch.py``) and the peer serving it
(``serve.py``), and what both sides hold to.

Handler ``<run prefix>.batch``: the fetcher sends the batch's round and the offset it wants the payload from
(``HEADER`` bytes each, big-endian); the server answers with the payload's whole length (``HEADER`` bytes,
big-endian; 0 when it no longer holds that batch), then the payload from that offset. A relayed connection may be
cut after a fixed number of bytes (p2pd's built-in relay: 128 KiB each way, docs/nat.md): the fetcher then opens
another stream asking from where the last one ended.

Both sides bound one exchange by the same deadline (``fetch_deadline``, scaled to the payload's size), and each
keeps at most ``SLOTS_PER_PEER`` exchanges with one peer at once (``slots.py``).
"""

from dataclasses import dataclass

from hivemind.p2p.p2p_daemon_bindings.datastructures import StreamInfo

from ftis.node.config import SwarmConfig

HEADER = 8  # bytes of a round, an offset or a length on the stream
SLOTS_PER_PEER = 2  # fetches from, and serves to, one peer at once


@dataclass(frozen=True)
class FetchDeadline:
    """Seconds one fetch of a payload may take, connect to last byte, by its size: ``base_s`` plus the time at
    ``min_bytes_per_s``, at most ``timeout_s``. A slow peer holds a fetch slot no longer than its payload's size
    justifies; the server holds a serve slot as long, no longer."""

    base_s: float
    min_bytes_per_s: float
    timeout_s: float

    def __call__(self, size: int) -> float:
        return min(self.timeout_s, self.base_s + size / self.min_bytes_per_s)


def fetch_deadline(swarm: SwarmConfig) -> FetchDeadline:
    """``[swarm]``'s ``fetch_base_s``, ``fetch_min_bytes_per_s`` and ``fetch_timeout_s``."""
    return FetchDeadline(swarm.fetch_base_s, swarm.fetch_min_bytes_per_s, swarm.fetch_timeout_s)


def relayed(info: StreamInfo) -> bool:
    """Whether a stream runs over a relayed connection (its remote address is a circuit)."""
    return "/p2p-circuit" in str(info.addr)
