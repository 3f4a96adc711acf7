"""A real NAT on this machine: three network namespaces joined by veth pairs (docs/nat.md, DESIGN §4); built by
``tests/test_nat.py`` (through ``tests/helpers/netns.py``, which skips where it cannot) and ``relay_fetch.py``.

    public  11.77.1.1/24 ─── 11.77.1.2/24  router  10.77.2.1/24 ─── 10.77.2.2/24  home
                                           (MASQUERADE for 10.77.2.0/24 out of its public side)

The public side's addresses are not private ones (libp2p builds circuit addresses from public addresses only).
"public" holds the bootstrap/relay and a public node; "home" sits behind the router, its default route
the router, so what it sends to public arrives from 11.77.1.2; public has no route to 10.77.2.0/24,
so nothing there can dial home. No namespace has a route out of the machine, and no address here is
the machine's own: all traffic stays on the namespaces' addresses.

``with Nat() as nat:`` builds it and always tears it down (the processes started in it with
``nat.popen`` are killed first, then the namespaces deleted, which deletes their veths). The names
carry this process's pid (``ftisnat-<pid>-public``), so a run killed before its teardown is cleaned up
by the next one (``remove_leftovers``: namespaces whose pid is no longer alive), and two runs at once
do not meet. ``cannot_build()`` says why this machine cannot build it (not root, no ``ip`` or
``iptables``), or ``None``: a test then skips with that reason (unless ``FTIS_REQUIRE_NETNS=1``), a
benchmark prints it and exits nonzero.
"""

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence

PREFIX = "ftisnat-"
PUBLIC_IP, ROUTER_PUBLIC_IP, ROUTER_HOME_IP, HOME_IP = "11.77.1.1", "11.77.1.2", "10.77.2.1", "10.77.2.2"
HOME_NET = "10.77.2.0/24"
_COMMAND_TIMEOUT_S = 10.0  # one ip/iptables command
_MAX_PROCESSES = 16  # processes one topology may run at once
_KILL_GRACE_S = 5.0  # SIGTERM, then SIGKILL after this


def cannot_build() -> str | None:
    """Why network namespaces with a NAT cannot be built here, or ``None`` when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"no `{tool}` on PATH (Debian: apt-get install iproute2 iptables)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    try:
        _ip("netns", "add", probe)
    except subprocess.CalledProcessError as error:
        return f"cannot create a network namespace: {error.stderr.strip()}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=_COMMAND_TIMEOUT_S)
    return None


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True,
                          timeout=_COMMAND_TIMEOUT_S).stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_namespace_processes(name: str) -> None:
    """Every process still inside namespace ``name`` (all started in it by us: the namespace is ours)."""
    with contextlib.suppress(subprocess.SubprocessError):
        pids = [int(pid) for pid in _ip("netns", "pids", name).split()]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _delete(name: str) -> None:
    _kill_namespace_processes(name)
    subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=_COMMAND_TIMEOUT_S)


def remove_leftovers() -> list[str]:
    """Deletes the namespaces of earlier runs whose process is gone; returns their names."""
    removed = []
    for line in _ip("netns", "list").splitlines():
        name = line.split()[0] if line.strip() else ""
        if not name.startswith(PREFIX):
            continue
        owner = name[len(PREFIX):].split("-")[0]
        if owner.isdigit() and not _alive(int(owner)):
            _delete(name)
            removed.append(name)
    return removed


class Nat:
    """The three namespaces; ``public``, ``router``, ``home`` are their names."""

    def __init__(self) -> None:
        tag = f"{PREFIX}{os.getpid()}"
        self.public, self.router, self.home = f"{tag}-public", f"{tag}-router", f"{tag}-home"
        self._processes: list[subprocess.Popen] = []

    def __enter__(self) -> "Nat":
        remove_leftovers()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _build(self) -> None:
        for name in (self.public, self.router, self.home):
            _delete(name)  # a namespace of ours from a test before that did not get torn down
            _ip("netns", "add", name)
            self.run(name, "ip", "link", "set", "lo", "up")
        _ip("link", "add", "pub0", "netns", self.public, "type", "veth", "peer", "name", "rtr-pub", "netns",
            self.router)
        _ip("link", "add", "home0", "netns", self.home, "type", "veth", "peer", "name", "rtr-home", "netns",
            self.router)
        for name, device, address in [(self.public, "pub0", PUBLIC_IP), (self.router, "rtr-pub", ROUTER_PUBLIC_IP),
                                      (self.router, "rtr-home", ROUTER_HOME_IP), (self.home, "home0", HOME_IP)]:
            self.run(name, "ip", "addr", "add", f"{address}/24", "dev", device)
            self.run(name, "ip", "link", "set", device, "up")
        self.run(self.home, "ip", "route", "add", "default", "via", ROUTER_HOME_IP)
        self.run(self.router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        self.run(self.router, "iptables", "-t", "nat", "-A", "POSTROUTING", "-s", HOME_NET, "-o", "rtr-pub",
                 "-j", "MASQUERADE")

    def run(self, namespace: str, *command: str, timeout: float = _COMMAND_TIMEOUT_S,
            check: bool = True) -> subprocess.CompletedProcess:
        """``command`` inside ``namespace``, to its end (at most ``timeout`` seconds)."""
        return subprocess.run(["ip", "netns", "exec", namespace, *command], check=check, capture_output=True,
                              text=True, timeout=timeout)

    def popen(self, namespace: str, command: Sequence[str], **kwargs) -> subprocess.Popen:
        """``command`` started inside ``namespace``; killed at teardown if still running."""
        self._processes = [p for p in self._processes if p.poll() is None]
        if len(self._processes) >= _MAX_PROCESSES:
            raise RuntimeError(f"more than {_MAX_PROCESSES} processes in one NAT topology")
        process = subprocess.Popen(["ip", "netns", "exec", namespace, *command], **kwargs)
        self._processes.append(process)
        return process

    def close(self) -> None:
        for process in self._processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + _KILL_GRACE_S
        for process in self._processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.0, deadline - time.monotonic()))
            if process.poll() is None:
                process.kill()
                process.wait(_KILL_GRACE_S)
        for name in (self.home, self.router, self.public):
            _delete(name)  # SIGKILLs what is left inside (a DHT child, a p2pd), then deletes namespace and veths
