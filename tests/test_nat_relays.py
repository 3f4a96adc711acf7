"""Fetches across a real NAT go through a relay, and move to another relay when the first goes (docs/nat.md).

Network namespaces (``helpers.netns``): in "public", the bootstrap (relay A, on by default), a second public
member offering a relay (B: ``reachability = "public"``, ``relay_service = true``, publishing nothing) and a
fetch-only node F (client mode: it dials out and is dialled by nobody, so no connection from the home node to it
exists for a fetch to reuse); in "home", behind the masquerading router, node H with ``relays = [A, B]``.

The test shows: H announces itself relayed through its relays; F receives H's batches over a relayed connection (F
counts the payload bytes it fetched over a relayed connection, H those it served over one); when A is stopped, F
still receives H's new batches (through B, although B resets each relayed connection after 64 KiB and H's batches
are larger: a fetch goes on over a new connection from where the last one stopped); when B is stopped too, H says
plainly that peers outside its network cannot fetch its batches and announces itself "private". Skipped where
namespaces cannot be built, unless FTIS_REQUIRE_NETNS=1 (.ci/run).
"""

import signal
import time

import pytest
from helpers.netns import PUBLIC_IP, Nat, require_netns
from test_nat import Lines, _start, start_bootstrap

pytestmark = [pytest.mark.hivemind, pytest.mark.netns]

RUN = "nat-relays"
LIMIT = 64 * 1024  # relay B resets a relayed connection after this many bytes each way; H's batches are larger
DEADLINE_S = 150.0  # per stage: start-up (torch's import, four processes on a loaded machine), AutoNAT, slots


def _stop(lines: Lines) -> None:
    lines.process.send_signal(signal.SIGTERM)
    lines.process.wait(30)


def _last_round(lines: Lines, peer_id: str) -> int:
    rounds = [int(line.split()[2]) for line in list(lines.lines) if line.startswith(f"got {peer_id} ")]
    return max(rounds, default=-1)


def _got_after(lines: Lines, peer_id: str, round_: int, deadline: float) -> int:
    """Wait for a batch of ``peer_id`` of a round after ``round_``; its round."""
    while time.monotonic() < deadline:
        if _last_round(lines, peer_id) > round_:
            return _last_round(lines, peer_id)
        time.sleep(0.3)
    pytest.fail(f"no batch of {peer_id} after round {round_}; output:\n{''.join(lines.lines)[-3000:]}")


def _relayed_bytes(lines: Lines, column: int, deadline: float) -> int:
    """The latest figure in ``column`` of the process's ``stats`` lines, once it is above 0 (or at the deadline)."""
    while True:
        figures = [int(line.split()[column]) for line in list(lines.lines) if line.startswith("stats ")]
        if (figures and figures[-1] > 0) or time.monotonic() >= deadline:
            return figures[-1] if figures else 0
        time.sleep(0.5)


def test_fetches_go_through_a_relay_and_move_to_another_when_it_goes():
    require_netns()
    with Nat() as nat:
        deadline = time.monotonic() + DEADLINE_S
        relay_a, a_addr = start_bootstrap(nat, RUN, deadline)
        a_id = a_addr.rsplit("/", 1)[1]
        slow = ("--run-id", RUN, "--interval", "0.5", "--fetch-timeout", "10", "--start-timeout", "120")
        relay_b = _start(nat, nat.public, "-m", "helpers.swarm_peer", "--peer", a_addr, "--host", PUBLIC_IP, *slow,
                         "--reachability", "public", "--relay-service", "--quiet", "--relay-data-limit", str(LIMIT))
        b_id = relay_b.wait_for("peer ", deadline).split()[1]
        b_addr = next(a for a in relay_b.wait_for("addrs ", deadline, PUBLIC_IP).split()[1:] if PUBLIC_IP in a)
        relays = ("--relay", a_addr, "--relay", b_addr)
        home = _start(nat, nat.home, "-m", "helpers.swarm_peer", "--peer", a_addr, "--host", "10.77.2.2", *slow,
                      *relays, "--publish-when-reached", "--groups", "100", "--group-size", "64", "--interval", "1")
        fetcher = _start(nat, nat.public, "-m", "helpers.swarm_peer", "--peer", a_addr, "--host", PUBLIC_IP, *slow,
                         *relays, "--client-mode", "--quiet")
        home_id = home.wait_for("peer ", deadline).split()[1]

        # H holds a slot on a relay and says so in its announcement; F gets its batches over a relayed connection.
        reach = home.wait_for("reach relayed Q", deadline).split()
        assert set(reach[2:]) <= {a_id, b_id}, reach
        _got_after(fetcher, home_id, -1, deadline)
        assert _relayed_bytes(fetcher, 1, deadline) > 0  # payload bytes F fetched over a relayed connection
        assert _relayed_bytes(home, 2, deadline) > 0  # ...and H served over one

        # Relay A goes: H's new batches still reach F, through B, which cuts every relayed connection after 64 KiB
        # (p2pd's built-in relay, if it answers instead, after 128 KiB): each fetch goes on over new ones.
        deadline = time.monotonic() + DEADLINE_S
        _stop(relay_a)
        before = _last_round(fetcher, home_id)
        home.wait_for("reach relayed", deadline, b_id)
        _got_after(fetcher, home_id, before + 2, deadline)

        # B goes too: H has no relay left and says so.
        deadline = time.monotonic() + DEADLINE_S
        _stop(relay_b)
        home.wait_for("reach private", deadline)
        home.wait_for("", deadline, "PEERS OUTSIDE THIS NODE'S NETWORK CANNOT FETCH ITS BATCHES")
