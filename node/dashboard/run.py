"""``ftis-node dashboard``: join the swarm as a light client (as ``ftis-node status`` does), watch the nodes'
folders, serve the page until Ctrl-C or SIGTERM.

    run_dashboard(DashboardRequest(peers=[maddr], nodes=[Path("runs/me")]), echo=print)

``open_dashboard`` does the same without blocking, for the tests and for callers that serve it from a thread.
"""

import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ftis.node.config import SwarmConfig
from ftis.node.dashboard import defaults
from ftis.node.dashboard.nodes import NodeWatch
from ftis.node.dashboard.server import Content, DashboardServer, make_server


@dataclass(frozen=True)
class DashboardRequest:
    swarm: SwarmConfig | None = None  # a light client's settings (initial peers, run id, shards); None: no swarm
    nodes: Sequence[Path] = field(default_factory=list)
    host: str = defaults.HOST
    port: int = defaults.PORT  # 0: any free port
    public: bool = False  # allow an address that is not loopback
    refresh_s: float = defaults.REFRESH_S
    points: int = defaults.POINTS


class OpenDashboard:
    """A dashboard serving from a thread of its own; ``close()`` stops the server, the reader and the DHT."""

    def __init__(self, server: DashboardServer, close_swarm: Callable[[], None]):
        self.server, self._close_swarm = server, close_swarm
        self.url = server.url
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="dashboard-server", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()
        self._close_swarm()


def node_names(folders: Sequence[Path]) -> list[str]:
    """Each folder's name, or its whole path where two share a name (the demo's small and solo/small)."""
    names = [folder.name or str(folder) for folder in folders]
    return [str(folder) if names.count(name) > 1 else name for folder, name in zip(folders, names, strict=True)]


def open_dashboard(request: DashboardRequest) -> OpenDashboard:
    """Bind the server (``DashboardError`` for a public address not allowed, a port in use), join the swarm
    (``SwarmError``), start serving; nothing is left running when it raises."""
    from ftis.node.dashboard.members import MembersWatch

    watches = [NodeWatch(folder, name, request.points)
               for folder, name in zip(request.nodes, node_names(request.nodes), strict=True)]
    content = Content(None if request.swarm is None else request.swarm.run_id, request.refresh_s, None, watches)
    server = make_server(content, request.host, request.port, request.public)  # before joining: a refusal is at once
    if request.swarm is None:
        return OpenDashboard(server, lambda: None)
    from ftis.node.swarm.dht.transport import start_dht

    scratch = Path(tempfile.mkdtemp(prefix="ftis-dashboard-"))
    try:
        dht, _ = start_dht(request.swarm, scratch / "identity.key", announce=False)
    except BaseException:
        server.server_close()
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    watch = MembersWatch(dht, request.swarm.run_id, request.swarm.shards, request.refresh_s)
    content.members = watch
    watch.start()

    def close_swarm() -> None:
        watch.close()
        dht.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)

    return OpenDashboard(server, close_swarm)


def run_dashboard(request: DashboardRequest, echo: Callable[[str], None]) -> None:
    """Serve until interrupted (KeyboardInterrupt, or ``signals.Terminated``, propagate after closing)."""
    dashboard = open_dashboard(request)
    try:
        echo(f"dashboard: {dashboard.url}")
        if request.swarm is not None:
            echo(f"run {request.swarm.run_id!r}: members read from the DHT every {request.refresh_s:g} s")
        for folder in request.nodes:
            echo(f"node folder: {folder}")
        while True:  # the server runs on its own thread; this one waits for Ctrl-C or SIGTERM
            time.sleep(3600)
    finally:
        dashboard.close()
