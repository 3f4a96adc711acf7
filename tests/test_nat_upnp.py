"""A node behind a router that offers UPnP-IGD and NAT-PMP maps a port on it and is fetched there (docs/nat.md).

Network namespaces (``helpers.netns``) with a real gateway daemon: Debian's ``miniupnpd`` in "router"
(``Miniupnpd``), the bootstrap and a fetch-only node (client mode: it dials out and nobody dials it) in "public",
a node in "home" with default settings (hivemind starts its ``p2pd`` with ``-natPortMap``). The test shows that
the home node maps a public port on the router to its listening port and advertises it, that a plain TCP connect
from "public" to that port reaches the home node, and that the fetcher receives its batches with no byte over a
relayed connection, through the router's forward. (How the node announces itself meanwhile depends on AutoNAT's
probe timing, docs/nat.md: ``direct`` once a peer dials it back at the mapped port, ``relayed`` for a while when
an earlier probe, sent before the mapping existed, fails late; the test does not depend on it.) Skipped where
namespaces cannot be built or ``miniupnpd`` is not installed, unless FTIS_REQUIRE_NETNS=1 (.ci/run installs it).
"""

import time

import pytest
from helpers.netns import HOME_IP, PUBLIC_IP, ROUTER_PUBLIC_IP, Miniupnpd, Nat, require_miniupnpd, require_netns
from test_nat import Lines, _dial, _start, start_bootstrap

pytestmark = [pytest.mark.hivemind, pytest.mark.netns]

RUN = "nat-upnp"
DEADLINE_S = 80.0  # start-up of three processes on a loaded machine; the mapping takes ~5 s, AutoNAT a few more
BATCHES = 3


def _port(line: str, ip: str) -> int:
    return int(line.split(f"/ip4/{ip}/tcp/")[1].split("/")[0])


def _batches(lines: Lines, peer_id: str, count: int, deadline: float) -> None:
    while sum(line.startswith(f"got {peer_id} ") for line in list(lines.lines)) < count:
        if time.monotonic() >= deadline:
            pytest.fail(f"fewer than {count} batches of {peer_id}; output:\n{''.join(lines.lines)[-3000:]}")
        time.sleep(0.3)


def test_a_node_behind_a_upnp_router_maps_a_port_and_is_fetched_through_it(tmp_path):
    require_netns()
    require_miniupnpd()
    with Nat() as nat, Miniupnpd(nat, tmp_path) as router:
        deadline = time.monotonic() + DEADLINE_S
        _, peer = start_bootstrap(nat, RUN, deadline)
        slow = ("--run-id", RUN, "--interval", "0.5", "--fetch-timeout", "10", "--start-timeout", "60")
        # Up before the home node, as a member already in the swarm would be.
        fetcher = _start(nat, nat.public, "-m", "helpers.swarm_peer", "--peer", peer, "--host", PUBLIC_IP, *slow,
                         "--client-mode", "--quiet")
        fetcher.wait_for("peer ", deadline)
        home = _start(nat, nat.home, "-m", "helpers.swarm_peer", "--peer", peer, "--host", HOME_IP, *slow)
        home_id = home.wait_for("peer ", deadline).split()[1]
        listening = _port(home.wait_for("addrs ", deadline, f"/ip4/{HOME_IP}/tcp/"), HOME_IP)

        # go-libp2p finds the gateway and maps a public port to its listening port; the node advertises it.
        mapped = _port(home.wait_for("addrs ", deadline, f"/ip4/{ROUTER_PUBLIC_IP}/tcp/"), ROUTER_PUBLIC_IP)
        assert f"redirecting port {mapped} to {HOME_IP}:{listening} protocol TCP" in router.log(), router.log()[-3000:]
        assert mapped in router.forwards()

        # Its batches reach the fetcher over a connection through the router's forward, none over a relay.
        _batches(fetcher, home_id, BATCHES, deadline)
        relayed_received = [int(line.split()[1]) for line in list(fetcher.lines) if line.startswith("stats ")]
        assert relayed_received and relayed_received[-1] == 0, relayed_received[-5:]
        taken = router.forwards()[mapped]
        assert taken >= 1  # the first packet of each connection through the forward

        # A plain TCP connect from the public side to the mapped port reaches the home node.
        assert _dial(nat, nat.public, ROUTER_PUBLIC_IP, mapped) == "connected"
        assert router.forwards()[mapped] > taken
