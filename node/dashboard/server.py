"""The dashboard's web server: one page, its script and style sheet, and three JSON endpoints the page
polls. Standard library only (``http.server``); the files it serves are the package's own
(``static/``), so it works with no internet.

    GET /                the page (static/index.html), which loads /dashboard.js and /dashboard.css
    GET /api/layout      the run id, the refresh interval, the charts (charts.py) and the nodes' names
    GET /api/members     the run's members (members.py), or why they cannot be read
    GET /api/nodes       each node's series, latest figures and peer scores (nodes.py)

Security: it binds 127.0.0.1 by default and refuses an address that is not loopback unless ``public``
is set (``check_bind``): what it serves (peer ids, scores, paths of the node folders) is for the machine's
user. On loopback it also refuses a request whose ``Host`` is not the address it serves (a web page
elsewhere cannot read it through a DNS name pointed at 127.0.0.1). Peers write model names, tokenizer
names and run ids: the page puts every value into the document as text (``textContent``), and every
response forbids inline script and anything from another origin (``SECURITY_HEADERS``); what peers wrote is made
printable before it is served (``printable``: no control, bidi or zero-width characters, a bounded length).

Slow clients: a connection must send its whole request (line and headers) within ``REQUEST_TIMEOUT_S`` however
slowly its bytes trickle, in at most ``MAX_HEAD_BYTES`` and ``MAX_HEAD_LINES`` (``heads.py``: past the deadline 408,
past the size 431, then closed). At most ``MAX_CONNECTIONS`` are served at once, each on a thread; a new one beyond
cuts the connection that has been sending its request longest, and is closed at once only when every slot is
answering: a client that opens connections and trickles bytes holds at most that many threads, for at most that
long, and never keeps a request that arrives whole from being answered.
"""

import io
import ipaddress
import json
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any

from ftis.node.dashboard import defaults
from ftis.node.dashboard.charts import layout
from ftis.node.dashboard.heads import HeadLimits, HeadRefused, HeadsReading, linger, read_head
from ftis.node.dashboard.members import MembersWatch
from ftis.node.dashboard.nodes import NodeWatch
from ftis.node.errors import USAGE, UserError

SECURITY_HEADERS = {
    # Only this origin's script, style and data; no inline script or style, no frames, no forms, no plugins.
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

CUT_WAIT_S = 1.0  # a cut connection's thread gives its slot back within this (it only has to notice the cut)

STATIC = {  # path -> (file in static/, content type)
    "/": ("index.html", "text/html; charset=utf-8"),
    "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
}


class DashboardError(UserError, RuntimeError):
    """The dashboard cannot serve as asked (a public address without ``public``, a port in use)."""

    exit_code = USAGE


def check_bind(host: str, public: bool) -> None:
    """``DashboardError`` unless ``host`` is a loopback address (or name) or ``public`` allows any."""
    if public:
        return
    addresses = _addresses(host)
    if not addresses or not all(ipaddress.ip_address(address.split("%")[0]).is_loopback for address in addresses):
        raise DashboardError(
            f"refusing to serve on {host or 'every address'} ({', '.join(sorted(addresses)) or 'any'}): not a "
            "loopback address, so anyone who reaches this machine could read the run's members, the nodes' "
            "folders and their scores; pass --public to serve it there anyway")


def _addresses(host: str) -> set[str]:
    if not host:
        return set()  # "" binds every interface
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except socket.gaierror as error:
        raise DashboardError(f"cannot resolve --host {host!r}: {error.strerror}") from None


@dataclass
class Content:
    """What the server serves, besides its static files; shared by the request threads."""

    run_id: str | None
    refresh_s: float
    members: MembersWatch | None  # None: no --peer given, the nodes' folders only
    nodes: Sequence[NodeWatch]

    def __post_init__(self) -> None:
        self._nodes_lock = threading.Lock()  # one request at a time reads the folders (each watch keeps offsets)

    def api(self, path: str) -> dict[str, Any] | None:
        if path == "/api/layout":
            return {"run_id": self.run_id, "refresh_s": self.refresh_s, "charts": layout(),
                    "nodes": [watch.name for watch in self.nodes], "members": self.members is not None}
        if path == "/api/members":
            if self.members is None:
                return {"run_id": self.run_id, "read_at": None, "count": 0, "members": [],
                        "error": "no --peer given: the dashboard does not read the swarm"}
            return self.members.state()
        if path == "/api/nodes":
            with self._nodes_lock:
                return {"nodes": [watch.state() for watch in self.nodes]}
        return None


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True  # a page left open must not hold the process at exit
    request_queue_size = 128  # connections the kernel holds until accepted (then served, or closed at once)

    def __init__(self, host: str, port: int, content: Content, allowed_hosts: set[str] | None,
                 request_timeout_s: float = defaults.REQUEST_TIMEOUT_S,
                 max_connections: int = defaults.MAX_CONNECTIONS, max_head_bytes: int = defaults.MAX_HEAD_BYTES,
                 max_head_lines: int = defaults.MAX_HEAD_LINES):
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.content = content
        self.request_timeout_s = request_timeout_s  # the request's deadline, and the answer's
        self.head_limits = HeadLimits(request_timeout_s, max_head_bytes, max_head_lines)
        self.reading = HeadsReading()  # the served connections still sending their request
        self._slots = threading.BoundedSemaphore(max_connections)
        self.turned_away = 0  # connections closed unanswered: every slot was answering
        self.cut = 0  # connections closed unanswered to make room: the one sending its request longest
        self.allowed_hosts = allowed_hosts  # None: any Host header (served on a public address)
        self.static = {path: (resources.files(__package__).joinpath("static", name).read_bytes(), kind)
                       for path, (name, kind) in STATIC.items()}
        super().__init__((host, port), Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection on a thread if a slot is free or can be freed by cutting the connection that has
        been sending its request longest (its thread ends at once); else close it at once."""
        if not self._slots.acquire(blocking=False) and not self._make_room():
            self.turned_away += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def _make_room(self) -> bool:
        if not self.reading.cut_oldest():
            return False
        self.cut += 1
        return self._slots.acquire(timeout=CUT_WAIT_S)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    @property
    def url(self) -> str:
        host, port = str(self.server_address[0]), self.server_address[1]
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/"


class Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    server_version = "ftis-node-dashboard"
    sys_version = ""

    def setup(self) -> None:
        self.timeout = self.server.request_timeout_s  # the socket's: bounds each send of the answer (sendall: whole)
        super().setup()

    def handle(self) -> None:
        """One request: its head read within the deadline and the limits (``heads.py``), then answered."""
        sock, server = self.connection, self.server
        server.reading.add(sock)
        try:
            head = read_head(sock, server.head_limits)
        except HeadRefused as refusal:
            if server.reading.done(sock) and refusal.status is not None:
                self._refuse(refusal.status, str(refusal))
            return
        if not server.reading.done(sock):  # cut to make room just as it arrived
            return
        sock.settimeout(server.request_timeout_s)
        self.rfile.close()
        self.rfile = io.BytesIO(head)
        self.handle_one_request()

    def _refuse(self, status: HTTPStatus, why: str) -> None:
        self.command, self.requestline, self.request_version = "", "", "HTTP/1.0"  # none was read
        self.connection.settimeout(self.server.request_timeout_s)
        try:
            self._send(status, f"{why}\n".encode(), "text/plain; charset=utf-8")
        except OSError:  # the client is gone
            return
        linger(self.connection, 4 * self.server.head_limits.max_bytes)

    def do_GET(self) -> None:  # the name http.server calls
        allowed = self.server.allowed_hosts
        if allowed is not None and self.headers.get("Host", "").lower() not in allowed:
            self._send(HTTPStatus.MISDIRECTED_REQUEST, b"unexpected Host header\n", "text/plain; charset=utf-8")
            return
        path = self.path.split("?", 1)[0]
        if path in self.server.static:
            body, kind = self.server.static[path]
            self._send(HTTPStatus.OK, body, kind)
            return
        data = self.server.content.api(path)
        if data is None:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")
            return
        self._send(HTTPStatus.OK, json.dumps(data, allow_nan=False).encode(), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # every poll would print a line: quiet
        pass


def make_server(content: Content, host: str = defaults.HOST, port: int = defaults.PORT,
                public: bool = False) -> DashboardServer:
    """A server bound and ready to ``serve_forever``; ``DashboardError`` for a public address without
    ``public``, or an address it cannot bind."""
    check_bind(host, public)
    try:
        server = DashboardServer(host, port, content, allowed_hosts=None)
    except OSError as error:
        raise DashboardError(f"cannot serve on {host}:{port}: {error.strerror}") from None
    if not public:
        bound = server.server_address[1]
        names = {host, "localhost", "127.0.0.1", "[::1]"}
        server.allowed_hosts = {f"{name}:{bound}".lower() for name in names} | {f"[{host}]:{bound}".lower()}
    return server
