"""``[swarm] reachability`` and the relay settings as hivemind options and p2pd flags
(node/swarm/reach/reachability.py)."""

from ftis.node.config import SwarmConfig
from ftis.node.swarm.reach.reachability import ReachSettings, describe, p2p_options, p2pd_flags, reach_settings

BOOT = "/ip4/11.77.1.1/tcp/31337/p2p/QmaJm5o3vKEDne5UDp7wmki7zyMs6rHaYfgXSL17BsYP9t"


def reach(**settings: object) -> ReachSettings:
    return reach_settings(SwarmConfig(**settings))


def test_auto_behind_a_nat_reserves_on_the_initial_peers_without_discovery():
    config = SwarmConfig(initial_peers=[BOOT])
    assert p2p_options(reach_settings(config)) == {"use_relay": True, "use_auto_relay": True}  # AutoNAT decides
    assert {"-relayDiscovery=0", f"-trustedRelays={BOOT}"} <= set(p2pd_flags(reach_settings(config)))


def test_relayed_forces_private_and_public_reserves_nothing():
    assert p2p_options(reach(initial_peers=[BOOT], reachability="relayed"))["force_reachability"] == "private"
    public = SwarmConfig(initial_peers=[BOOT], reachability="public")
    assert p2p_options(reach_settings(public)) == {"use_relay": True, "force_reachability": "public"}
    assert not any(flag.startswith("-trustedRelays") for flag in p2pd_flags(reach_settings(public)))


def test_a_relay_off_admits_nobody_and_on_is_bounded():
    off = p2pd_flags(reach())
    assert {"-relayService=1", "-relayMaxReservations=0", "-relayMaxCircuits=0"} <= set(off)
    on = p2pd_flags(reach(relay_service=True, relay_max_reservations=5, relay_time_limit_s=60))
    assert {"-relayMaxReservations=5", "-relayTimeLimit=60s", f"-relayDataLimit={1 << 30}"} <= set(on)


def test_client_mode_and_the_first_node_reserve_nothing():
    assert "use_auto_relay" not in p2p_options(reach(initial_peers=[BOOT], client_mode=True))
    assert "use_auto_relay" not in p2p_options(reach())  # no peers: nobody to relay through


def test_the_start_up_lines_say_how_peers_reach_the_node():
    assert "through a slot it reserves on one of 1 relay" in describe(reach(initial_peers=[BOOT]))[0]
    assert "directly if peers can dial it back" in describe(reach(initial_peers=[BOOT]))[0]
    assert "only through" in describe(reach(initial_peers=[BOOT], reachability="relayed"))[0]
    assert "dial this node directly" in describe(reach(initial_peers=[BOOT], reachability="public"))[0]
    assert "cannot be fetched" in describe(reach())[0]  # the first node: nobody to relay through
    assert "serves none" in describe(reach(initial_peers=[BOOT], client_mode=True))[0]
    offering = describe(reach(reachability="public", relay_service=True, relay_max_reservations=5))
    assert offering[1].startswith("relay: offered") and "at most 5 slots" in offering[1]
