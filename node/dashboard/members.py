"""The run's members as the dashboard shows them: read from the DHT the way ``ftis-node status`` reads them
(``swarm/dht/directory.py``'s ``read_members``), again every ``refresh_s``, by a thread of its own.

    watch = MembersWatch(dht, run_id="ftis-local-demo", shards=4, refresh_s=5.0)
    watch.start()
    watch.state()    # the latest reading, JSON-ready; a failed read keeps the members of the last good one
    watch.close()    # stops the thread (the caller shuts its DHT down)

The DHT client is started by the caller, in its main thread, before any server thread runs: hivemind forks
its DHT process, and a fork is only safe before other threads hold locks. What members wrote of themselves is
handed to the page through ``printable`` (no control, bidi or zero-width character; a bounded length).
"""

import threading
import time
from dataclasses import asdict
from typing import Any

import hivemind

from ftis.node.printable import printable
from ftis.node.swarm.dht.directory import READER_SHARDS, MembersReading, read_members
from ftis.node.swarm.status import reached
from ftis.node.swarm.transport import Member
from ftis.protocol.limits import MAX_MULTIADDR_CHARS

MAX_MEMBERS = 500  # rows the page gets; a hostile swarm can announce any number of peers


class MembersWatch:
    def __init__(self, dht: hivemind.DHT, run_id: str, shards: int, refresh_s: float):
        self._dht, self.run_id, self._shards, self.refresh_s = dht, run_id, shards, refresh_s
        self._lock = threading.Lock()
        self._members: list[Member] = []
        self._reading: MembersReading | None = None
        self._read_at: float | None = None  # unix seconds of the last good reading
        self._error: str | None = None  # why the last reading failed, until one succeeds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dashboard-members", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.read_once()
            self._stop.wait(self.refresh_s)

    def read_once(self) -> None:
        # A reading waits at most a few refresh intervals: a DHT that stopped answering shows as an error.
        try:
            reading = read_members(self._dht, self.run_id, self._shards, timeout=max(10.0, 3 * self.refresh_s),
                                   sample=READER_SHARDS)
        except Exception as error:  # hivemind's failures are many types; each is shown, not hidden
            with self._lock:
                self._error = printable(f"{type(error).__name__}: {error}" if str(error) else type(error).__name__,
                                        max_chars=500)
            return
        with self._lock:
            self._members, self._reading, self._read_at, self._error = reading.members, reading, time.time(), None

    def state(self) -> dict[str, Any]:
        with self._lock:
            members, reading, read_at, error = self._members, self._reading, self._read_at, self._error
        return {"run_id": self.run_id, "read_at": read_at, "error": error, "count": len(members),
                "estimated": None if reading is None or reading.complete else reading.estimated_total,
                "shards_read": None if reading is None else reading.summary(),
                "members": [shown(member) for member in members[:MAX_MEMBERS]]}

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=max(15.0, 3 * self.refresh_s))


def shown(member: Member) -> dict[str, Any]:
    """The member as the page gets it: its strings printable, and how it is reached in words (``reached``)."""
    row = asdict(member) | {key: printable(getattr(member, key)) for key in ("peer_id", "model", "adapter",
                                                                            "tokenizer", "reach")}
    return row | {"relays": [printable(relay, MAX_MULTIADDR_CHARS) for relay in member.relays],
                  "reached": reached(member)}
