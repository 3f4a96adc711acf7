"""A real NAT on this machine: three network namespaces joined by veth pairs (docs/nat.md, DESIGN §4); built by
``tests/test_nat*.py`` (through ``tests/helpers/netns.py``, which skips where it cannot) and ``relay_fetch.py``.

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
by the next one (``remove_leftovers``: namespaces whose pid is no longer alive). One topology is built at a
time on a machine: a second ``Nat()`` waits for the first's teardown (a lock file), because two at once,
each with its bootstrap, peers and ``p2pd`` daemons on two cores, made the timing-bound NAT tests fail now
and then (the relay-limits and UPnP tests, each once in a few runs on two test workers).
``cannot_build()`` says why this machine cannot build it (not root, no ``ip`` or ``iptables``), or ``None``:
a test then skips with that reason (unless ``FTIS_REQUIRE_NETNS=1``), a benchmark prints it and exits nonzero.

``with Miniupnpd(nat, directory) as router:`` makes the router a UPnP-IGD and NAT-PMP gateway for "home":
Debian's ``miniupnpd`` (package ``miniupnpd-iptables``) runs in "router" with a configuration written to
``directory``, its public side ``rtr-pub``, serving ``rtr-home``, mapping only ports 1024-65535 of hosts in
10.77.2.0/24 to themselves (``secure_mode``). The package's init script is not used (it needs files of the
``miniupnpd`` package, which configures a system service): the chains the daemon writes its rules into are made
here. ``cannot_run_miniupnpd()`` says why it cannot run here, or ``None``.
"""

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

PREFIX = "ftisnat-"
LOCK_PATH = os.path.join(tempfile.gettempdir(), "ftisnat.lock")  # held while a topology stands
PUBLIC_IP, ROUTER_PUBLIC_IP, ROUTER_HOME_IP, HOME_IP = "11.77.1.1", "11.77.1.2", "10.77.2.1", "10.77.2.2"
HOME_NET = "10.77.2.0/24"
_COMMAND_TIMEOUT_S = 10.0  # one ip/iptables command
_MAX_PROCESSES = 16  # processes one topology may run at once
_KILL_GRACE_S = 5.0  # SIGTERM, then SIGKILL after this


def benchmark_start() -> str | None:
    """What a benchmark on these namespaces prints first (CPUs, load average, hivemind's version); or None, after
    saying on standard error why they cannot be built here (the benchmark then exits with status 2)."""
    reason = cannot_build()
    if reason is not None:
        print(f"cannot build the NAT topology: {reason}", file=sys.stderr)
        return None
    import hivemind

    load = os.getloadavg()
    return (f"{os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start; "
            f"hivemind {hivemind.__version__}")


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
        self._lock: int | None = None

    def __enter__(self) -> "Nat":
        self._lock = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._lock, fcntl.LOCK_EX)  # released at close, or by the kernel if this process dies
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
        if self._lock is not None:
            os.close(self._lock)  # the next topology may be built
            self._lock = None


MINIUPNPD_CONFIG = """\
ext_ifname=rtr-pub
listening_ip=rtr-home
port=0
enable_natpmp=yes
enable_upnp=yes
secure_mode=yes
system_uptime=yes
notify_interval=30
uuid=3d3a7f1e-1b5c-4c8e-9a7b-6f1d2e3c4b5a
allow 1024-65535 10.77.2.0/24 1024-65535
deny 0-65535 0.0.0.0/0 0-65535
"""
# The chains miniupnpd-iptables adds its rules to (what the upstream iptables_init.sh makes), on the public side:
# port forwards (nat), their filter exceptions, and the source ports of mapped connections going out.
_MINIUPNPD_CHAINS = [
    ("nat", "MINIUPNPD", "PREROUTING", ["-i", "rtr-pub"]),
    ("nat", "MINIUPNPD-POSTROUTING", "POSTROUTING", ["-o", "rtr-pub"]),
    ("mangle", "MINIUPNPD", "PREROUTING", ["-i", "rtr-pub"]),
    ("filter", "MINIUPNPD", "FORWARD", ["-i", "rtr-pub", "!", "-o", "rtr-pub"]),
]


def _legacy_iptables() -> str | None:
    """The iptables command that writes the tables miniupnpd-iptables reads (libiptc: the legacy ones, not nftables'
    iptables, Debian's default)."""
    if shutil.which("iptables-legacy"):
        return "iptables-legacy"
    if shutil.which("iptables") and "legacy" in subprocess.run(["iptables", "--version"], capture_output=True,
                                                                 text=True, timeout=_COMMAND_TIMEOUT_S).stdout:
        return "iptables"
    return None


def cannot_run_miniupnpd() -> str | None:
    """Why ``Miniupnpd`` cannot run here (no ``miniupnpd`` built for iptables, no legacy iptables), or ``None``."""
    if shutil.which("miniupnpd") is None:
        return "no `miniupnpd` on PATH (Debian: apt-get install miniupnpd-iptables)"
    version = subprocess.run(["miniupnpd", "--version"], capture_output=True, text=True, timeout=_COMMAND_TIMEOUT_S)
    if "iptables" not in version.stdout + version.stderr:
        return "`miniupnpd` is not the iptables build (Debian: apt-get install miniupnpd-iptables)"
    if _legacy_iptables() is None:
        return "no `iptables-legacy` on PATH (Debian: apt-get install iptables)"
    return None


class Miniupnpd:
    """miniupnpd in ``nat``'s router, its output in ``directory/miniupnpd.log``; stopped on exit (and, being started
    with ``nat.popen``, killed at the topology's teardown whatever happens)."""

    def __init__(self, nat: Nat, directory: Path) -> None:
        self.nat, self.directory = nat, Path(directory)
        self.log_path = self.directory / "miniupnpd.log"
        self._iptables = _legacy_iptables() or "iptables-legacy"
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> "Miniupnpd":
        for table, chain, hook, match in _MINIUPNPD_CHAINS:
            self.nat.run(self.nat.router, self._iptables, "-t", table, "-N", chain)
            self.nat.run(self.nat.router, self._iptables, "-t", table, "-I", hook, *match, "-j", chain)
        config = self.directory / "miniupnpd.conf"
        config.write_text(MINIUPNPD_CONFIG)
        with open(self.log_path, "wb") as log:  # -d: in the foreground, logging to stderr
            self._process = self.nat.popen(self.nat.router, ["miniupnpd", "-d", "-f", str(config), "-P",
                                                             str(self.directory / "miniupnpd.pid")],
                                           stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + _COMMAND_TIMEOUT_S
        while "Listening for NAT-PMP" not in self.log() or "HTTP listening" not in self.log():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"miniupnpd did not start:\n{self.log()[-2000:]}")
            time.sleep(0.1)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(_KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(_KILL_GRACE_S)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def forwards(self) -> dict[int, int]:
        """The router's port forwards now, ``{public TCP port: packets that took it}`` (the first packet of each
        connection goes through the nat table)."""
        table = self.nat.run(self.nat.router, self._iptables, "-t", "nat", "-L", "MINIUPNPD", "-n", "-v", "-x").stdout
        forwards = {}
        for line in table.splitlines():
            fields = line.split()
            dport = [f for f in fields if f.startswith("dpt:")]
            if "DNAT" in fields and dport and fields[0].isdigit():
                forwards[int(dport[0][4:])] = int(fields[0])
        return forwards
