"""A request's head (its request line and header lines, up to the blank line) read within a deadline and a size, and
the connections still reading one, so that a slow one can make room for a new connection.

    head = read_head(sock, HeadLimits(deadline_s=5.0, max_bytes=16384, max_lines=64))   # or HeadRefused
    reading = HeadsReading()
    reading.add(sock) ... reading.done(sock)    # done: False when the connection was cut to make room
    reading.cut_oldest()                         # True when one was cut

The deadline bounds the whole head, however slowly its bytes trickle in (a socket's timeout bounds one read
only: a byte every few seconds would keep a connection forever). The dashboard serves GET requests without
bodies, one per connection, so the head is all a request is.
"""

import contextlib
import socket
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus

CHUNK_BYTES = 4096
LINGER_S = 1.0  # after a refusal, what the client still sends is read and dropped this long (see ``linger``)


@dataclass(frozen=True)
class HeadLimits:
    deadline_s: float  # the whole head must arrive within this many seconds of the connection
    max_bytes: int  # its bytes, the blank line that ends it included
    max_lines: int  # its lines: the request line, the header lines and the blank line


class HeadRefused(Exception):
    """The head did not arrive whole within the limits. ``status``: the answer to send (``None``: the connection
    is gone, nothing can be sent)."""

    def __init__(self, status: HTTPStatus | None, why: str):
        super().__init__(why)
        self.status = status


def read_head(sock: socket.socket, limits: HeadLimits) -> bytes:
    """The request's head, with whatever arrived after it; ``HeadRefused`` past the deadline (408), past the size
    or the lines (431), or when the client closed or was cut (``HeadsReading.cut_oldest``)."""
    deadline = time.monotonic() + limits.deadline_s
    head, searched = bytearray(), 0
    while (end := _end_of_head(head, searched)) is None:
        _check_size(head, limits)
        searched = max(0, len(head) - 2)  # the blank line may begin in what arrived before
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise HeadRefused(HTTPStatus.REQUEST_TIMEOUT, f"the request did not arrive within {limits.deadline_s:g} s")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(CHUNK_BYTES)
        except TimeoutError:
            raise HeadRefused(HTTPStatus.REQUEST_TIMEOUT,
                              f"the request did not arrive within {limits.deadline_s:g} s") from None
        except OSError as error:
            raise HeadRefused(None, f"connection lost ({error.strerror})") from None
        if not chunk:
            raise HeadRefused(None, "closed before the request ended")
        head += chunk
    _check_size(head[:end], limits)
    return bytes(head)


def _end_of_head(head: bytearray, start: int) -> int | None:
    """Where the blank line that ends the head ends (lines end in CRLF, or LF alone), searching from ``start``."""
    ends = [found + len(blank) for blank in (b"\n\r\n", b"\n\n") if (found := head.find(blank, start)) >= 0]
    return min(ends) if ends else None


def _check_size(head: bytes | bytearray, limits: HeadLimits) -> None:
    lines = head.count(b"\n")
    if len(head) > limits.max_bytes or lines > limits.max_lines:
        raise HeadRefused(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                          f"a request's head is at most {limits.max_bytes} bytes in {limits.max_lines} lines")


def linger(sock: socket.socket, max_bytes: int) -> None:
    """Read and drop what the client still sends, up to ``max_bytes`` for up to ``LINGER_S``, after our side is
    shut for writing: closing a socket with unread bytes resets the connection, and a reset can reach the client
    before the refusal it was sent."""
    deadline, dropped = time.monotonic() + LINGER_S, 0
    try:
        sock.shutdown(socket.SHUT_WR)
        while dropped < max_bytes and (remaining := deadline - time.monotonic()) > 0:
            sock.settimeout(remaining)
            chunk = sock.recv(CHUNK_BYTES)
            if not chunk:
                return
            dropped += len(chunk)
    except OSError:  # timed out, or the client is gone: either way, done
        return


class HeadsReading:
    """The connections still reading their head, oldest first; shared by the server's threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: dict[socket.socket, None] = {}  # insertion order: the oldest first

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self._socks[sock] = None

    def done(self, sock: socket.socket) -> bool:
        """The connection's head is read; False if it was cut meanwhile (its answer cannot be sent)."""
        with self._lock:
            return self._socks.pop(sock, False) is None

    def cut_oldest(self) -> bool:
        """Shut the connection that has been reading its head longest (its reader sees the connection closed and
        gives its slot back); False when no connection is reading one."""
        with self._lock:
            if not self._socks:
                return False
            sock = next(iter(self._socks))
            del self._socks[sock]
            with contextlib.suppress(OSError):  # closed meanwhile by its client
                sock.shutdown(socket.SHUT_RDWR)
            return True
