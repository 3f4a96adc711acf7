"""Serving this node's batches to the peers that fetch them, for ``HivemindTransport``.

A fetch is served only if a serving slot is free to the asker (``max_concurrent_serves`` in all, two per peer);
else its stream is closed at once and the asker tries again later (``turned_away``). So a hundred streams opened
by one identity hold two slots, not a hundred payloads. The payload is written in slices of the one copy the outbox
keeps, each awaited, within the deadline a fetcher of it gives itself (``stream.FetchDeadline``): a client
that never reads holds one slot for that long, never a copy.

Runs on the transport's network loop, as the handler of the run's stream (``stream.py``).
"""

import asyncio
import logging

from hivemind.p2p.p2p_daemon_bindings.datastructures import StreamInfo

from ftis.node.swarm.dht.slots import FairSlots
from ftis.node.swarm.dht.stream import HEADER, SLOTS_PER_PEER, FetchDeadline, relayed
from ftis.node.swarm.exchange.outbox import Outbox

logger = logging.getLogger(__name__)

_REQUEST_TIMEOUT_S = 5.0  # a client that does not send its request in time is dropped
_WRITE_SLICE = 64 * 1024  # a served payload goes out in slices of this many bytes, each awaited


class Server:
    def __init__(self, max_serves: int, deadline: FetchDeadline, outbox: Outbox):
        """``max_serves`` at once (``swarm.max_concurrent_serves``), each within ``deadline``."""
        self._deadline, self._outbox = deadline, outbox
        self._slots = FairSlots(max_serves, SLOTS_PER_PEER)
        self.turned_away = 0  # requests refused for lack of a serving slot
        self.relayed_sent = 0  # payload bytes served over a relayed connection

    async def serve(self, info: StreamInfo, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One fetch of one of our payloads (see the module's docstring)."""
        peer = info.peer_id.to_base58()
        if not self._slots.try_acquire(peer):
            self.turned_away += 1
            writer.close()
            return
        try:
            request = await asyncio.wait_for(reader.readexactly(2 * HEADER), _REQUEST_TIMEOUT_S)
            payload = self._outbox.payload(int.from_bytes(request[:HEADER], "big")) or b""
            offset = min(int.from_bytes(request[HEADER:], "big"), len(payload))
            async with asyncio.timeout(self._deadline(len(payload) - offset)):
                writer.write(len(payload).to_bytes(HEADER, "big"))
                view = memoryview(payload)
                for start in range(offset, len(view), _WRITE_SLICE):
                    writer.write(view[start : start + _WRITE_SLICE])
                    await writer.drain()
                await writer.drain()
            self.relayed_sent += len(payload) - offset if relayed(info) else 0
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError) as error:
            logger.debug("a fetch of ours ended early: %s", error)
        finally:
            writer.close()
            self._slots.release(peer)
