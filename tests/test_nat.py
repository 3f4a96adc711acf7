"""A node behind a real NAT reserves a slot on the bootstrap's relay and exchanges batches (docs/nat.md).

Network namespaces (``benchmarks/netns.py``): the bootstrap (``ftis-node bootstrap``, offering a relay by default)
and a public node in "public", a node in "home" behind a masquerading router, with the default
``reachability = "auto"``. The test shows that nothing in "public" can open a TCP connection to the home node's
listening port (neither at its own address, unroutable from there, nor at the router's: nothing is forwarded),
that the home node comes to advertise a ``/p2p-circuit`` address through the bootstrap, and that batches go
both ways: the home node's reach the public node (over whichever connection exists: the home node's DHT
requests open one, and a fetch takes it; ``test_nat_relays.py`` shows fetches over relayed connections), and it
receives the public node's.
Skipped where namespaces cannot be built (not root, no iptables), unless FTIS_REQUIRE_NETNS=1 (.ci/run).
"""

import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.netns import HOME_IP, PUBLIC_IP, ROUTER_PUBLIC_IP, Nat, require_netns

pytestmark = [pytest.mark.hivemind, pytest.mark.netns]

RUN = "nat-test"
DEADLINE_S = 150.0  # start-up (torch's import, three processes on a loaded machine), AutoNAT, a reservation
TESTS = str(Path(__file__).parent)


class Lines:
    """A process's output, read line by line as it comes."""

    def __init__(self, process: subprocess.Popen):
        self.process, self.lines, self._new = process, [], queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append(line)
            self._new.put(line)

    def wait_for(self, prefix: str, deadline: float, contains: str = "") -> str:
        """The first line (seen so far or coming) that starts with ``prefix`` and holds ``contains``."""
        for line in list(self.lines):
            if line.startswith(prefix) and contains in line:
                return line.strip()
        while time.monotonic() < deadline:
            try:
                line = self._new.get(timeout=0.5)
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            if line.startswith(prefix) and contains in line:
                return line.strip()
        if self.process.poll() is not None:
            self._reader.join(5)  # a process that ended: its last lines (a traceback, say) into the report
        ended = "" if self.process.poll() is None else f" (it ended with exit code {self.process.returncode})"
        pytest.fail(f"no {prefix!r} line holding {contains!r}{ended}; output:\n{''.join(self.lines)[-4000:]}")


def _start(nat: Nat, namespace: str, *args: str) -> Lines:
    process = nat.popen(namespace, [sys.executable, *args], cwd=TESTS, stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True)
    return Lines(process)


def start_bootstrap(nat: Nat, run_id: str, deadline: float, log_interval: float = 5.0) -> tuple[Lines, str]:
    """``ftis-node bootstrap`` in "public" (a relay, by default), and the address members join it at."""
    bootstrap = _start(nat, nat.public, "-c", "from ftis.node.cli import main; main()", "bootstrap",
                       "--host-maddrs", f"/ip4/{PUBLIC_IP}/tcp/0", "--run-id", run_id, "--log-interval",
                       str(log_interval))
    return bootstrap, bootstrap.wait_for("  ftis-node join --peer", deadline).split("--peer ")[1]


def _dial(nat: Nat, namespace: str, host: str, port: int) -> str:
    """What a plain TCP connect from ``namespace`` to ``host:port`` gives: "connected" or the error."""
    code = (f"import socket\ntry:\n socket.create_connection(({host!r}, {port}), timeout=3); print('connected')\n"
            "except OSError as e:\n print(type(e).__name__, e)")
    return nat.run(namespace, sys.executable, "-c", code, timeout=30).stdout.strip()


def test_a_node_behind_nat_serves_and_receives_through_the_relay():
    require_netns()
    with Nat() as nat:
        deadline = time.monotonic() + DEADLINE_S
        bootstrap, peer = start_bootstrap(nat, RUN, deadline)
        assert "relay: on" in bootstrap.wait_for("relay:", deadline)
        slow = ("--interval", "0.5", "--fetch-timeout", "10", "--start-timeout", "120")  # relayed: more time
        home = _start(nat, nat.home, "-m", "helpers.swarm_peer", "--peer", peer, "--run-id", RUN, "--host", HOME_IP,
                      *slow)
        public = _start(nat, nat.public, "-m", "helpers.swarm_peer", "--peer", peer, "--run-id", RUN,
                        "--host", PUBLIC_IP, *slow)
        home_id = home.wait_for("peer ", deadline).split()[1]
        public_id = public.wait_for("peer ", deadline).split()[1]

        # The home node listens on HOME_IP:port; from the public side that address is unroutable, and the
        # router forwards nothing.
        port = int(home.wait_for("addrs ", deadline, f"/ip4/{HOME_IP}/tcp/").split(f"/ip4/{HOME_IP}/tcp/")[1]
                   .split("/")[0])
        assert "unreachable" in _dial(nat, nat.public, HOME_IP, port)
        assert "connected" not in _dial(nat, nat.public, ROUTER_PUBLIC_IP, port)
        assert _dial(nat, nat.home, PUBLIC_IP, int(peer.split("/tcp/")[1].split("/")[0])) == "connected"

        # AutoNAT finds it unreachable; it reserves a slot on the bootstrap and advertises the circuit.
        relayed = home.wait_for("addrs ", deadline, "/p2p-circuit")
        assert f"/ip4/{PUBLIC_IP}/tcp/" in relayed and f"/p2p-circuit/p2p/{home_id}" in relayed

        public.wait_for("got ", deadline, home_id)  # the home node's batch, fetched through the relay
        home.wait_for("got ", deadline, public_id)  # and the public node's, fetched directly
