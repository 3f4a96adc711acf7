"""How a node finds out how peers reach it: libp2p's counters read from ``p2pd`` (node/swarm/reach/p2pd_metrics.py)
and the reach it announces (``reachability.own_reach``).

``HOME_PAGE`` is part of the page a real ``p2pd`` served, in the NAT test's "home" namespace after it reserved a
relay slot; ``RELAY_PAGE`` the bootstrap's, relaying for it. The last test reads a real ``p2pd``'s page."""

import time

import pytest

from ftis.node.config import SwarmConfig
from ftis.node.swarm.reach.p2pd_metrics import RelayCounters, counters_of, free_port, parse, read_counters
from ftis.node.swarm.reach.reachability import ReachSettings, RelayAwareDHT, own_reach, p2pd_flags, reach_settings
from ftis.protocol.announcement import Reach

HOME = "12D3KooWJ7nnrzGWGSmLZNGUQ5FHDaq4anzZygMzXpDxFn4xpbDh"
RELAY = "12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"
HOME_PAGE = """\
# HELP libp2p_autonat_reachability_status Current node reachability
# TYPE libp2p_autonat_reachability_status gauge
libp2p_autonat_reachability_status 2
libp2p_autonat_reachability_status_confidence 1
libp2p_autonat_received_dial_response_total{response_status="dial error"} 2
libp2p_autorelay_reservation_requests_outcome_total{outcome="success",request_type="new"} 1
libp2p_autorelay_reservation_requests_outcome_total{outcome="success",request_type="refresh"} 3
libp2p_autorelay_reservation_requests_outcome_total{outcome="error",request_type="refresh"} 1
libp2p_autorelay_reservations_closed_total 1
libp2p_autorelay_reservations_opened_total 1
libp2p_autorelay_status 1
libp2p_relaysvc_data_transferred_bytes_total 0
libp2p_relaysvc_status 0
go_memstats_alloc_bytes 1.2345e+07
"""
RELAY_PAGE = """\
libp2p_autonat_reachability_status 0
libp2p_relaysvc_connection_duration_seconds_bucket{le="0.005"} 0
libp2p_relaysvc_connection_request_response_status_total{status="ok"} 4
libp2p_relaysvc_connection_request_response_status_total{status="resource limit exceeded"} 2
libp2p_relaysvc_connections_total{type="opened"} 4
libp2p_relaysvc_connections_total{type="closed"} 3
libp2p_relaysvc_data_transferred_bytes_total 5.24288e+06
libp2p_relaysvc_reservation_request_response_status_total{status="ok"} 3
libp2p_relaysvc_reservation_request_response_status_total{status="reservation refused"} 1
libp2p_relaysvc_reservations_total{type="opened"} 3
libp2p_relaysvc_reservations_total{type="renewed"} 5
libp2p_relaysvc_status 1
"""


def reach(**settings: object) -> ReachSettings:
    return reach_settings(SwarmConfig(**settings))


def test_a_relayed_nodes_counters():
    assert counters_of(parse(HOME_PAGE)) == RelayCounters(autonat="private", slots_reserved=4, slot_failures=1,
                                                          slots_lost=1)


def test_a_relays_counters():
    assert counters_of(parse(RELAY_PAGE)) == RelayCounters(autonat="unknown", relayed_bytes=5_242_880, slots_given=3,
                                                           refusals=3, circuits=4)


def test_a_page_with_nothing_yet_or_garbage_reads_zero():
    assert counters_of(parse("")) == RelayCounters()
    assert counters_of(parse("libp2p_autonat_reachability_status NaN\nnot a line\n{}\n x y z")) == RelayCounters()
    assert parse('a{b="c d"} 3\n') == {"a": {'b="c d"': 3.0}}


CIRCUIT = f"/ip4/11.77.1.1/tcp/40213/p2p/{RELAY}/p2p-circuit"


@pytest.mark.parametrize(("config", "visible", "autonat", "expected"), [
    (SwarmConfig(), ["/ip4/127.0.0.1/tcp/1"], None, Reach()),
    (SwarmConfig(), ["/ip4/10.0.0.2/tcp/1"], "private", Reach("private")),
    (SwarmConfig(), ["/ip4/11.0.0.2/tcp/1"], "public", Reach("direct")),
    (SwarmConfig(reachability="public"), ["/ip4/11.0.0.2/tcp/1"], "unknown", Reach("direct")),
    (SwarmConfig(), ["/ip4/10.0.0.2/tcp/1", CIRCUIT, f"{CIRCUIT}/p2p/{HOME}", CIRCUIT], "private",
     Reach("relayed", (CIRCUIT, f"{CIRCUIT}/p2p/{HOME}"))),
    (SwarmConfig(client_mode=True), [CIRCUIT], "public", Reach("unreachable")),
], ids=["nothing-known", "private", "public", "forced-public", "relayed", "client-mode"])
def test_own_reach(config, visible, autonat, expected):
    counters = None if autonat is None else RelayCounters(autonat=autonat)
    assert own_reach(reach_settings(config), visible, counters) == expected


def test_own_reach_lists_at_most_four_circuits():
    circuits = [CIRCUIT.replace("40213", str(port)) for port in range(1, 9)]
    assert own_reach(reach(), circuits, None) == Reach("relayed", tuple(circuits[:4]))


def test_the_metrics_flag_is_on_loopback_only():
    port = free_port()
    assert p2pd_flags(reach(), port)[-1] == f"-metricsAddr=127.0.0.1:{port}"
    assert not any(flag.startswith("-metricsAddr") for flag in p2pd_flags(reach()))


@pytest.mark.hivemind
def test_a_real_p2pd_serves_its_counters_on_loopback():
    port = free_port()
    assert read_counters(port, timeout_s=0.5) is None  # nothing there yet: None, no error
    config = SwarmConfig(relay_service=True)
    dht = RelayAwareDHT(start=True, host_maddrs=["/ip4/127.0.0.1/tcp/0"],
                        p2pd_flags=p2pd_flags(reach_settings(config), port))
    try:
        deadline, counters = time.monotonic() + 20, None
        while counters is None and time.monotonic() < deadline:
            counters = read_counters(port)
            time.sleep(0.2)
        assert counters is not None and counters.autonat == "unknown" and counters.relayed_bytes == 0
    finally:
        dht.shutdown()
