"""Which circuit addresses a node dials a relayed member at, and their binary form (node/swarm/reach/circuits.py)."""

import pytest
from hivemind.p2p import PeerID

from ftis.node.swarm.reach.circuits import circuits_to_dial, maddr_bytes, relay_ids

RELAY = "QmVZy7KTUS8vgvBMuCz1Hxnn7am8TXYdvC8rYr8hs4LRFv"
MEMBER_RELAY = "12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo"
STRANGER = "QmaJm5o3vKEDne5UDp7wmki7zyMs6rHaYfgXSL17BsYP9t"
HOME = "QmNRusUHkoMoEPSEDXaHivATvuqW7QV67EjRRfsyMQbADN"
OWN_RELAYS = relay_ids([f"/ip4/11.77.1.1/tcp/31337/p2p/{RELAY}", "/ip4/11.77.1.9/tcp/1"])  # the 2nd names no id


def test_own_relays_by_peer_id():
    assert {RELAY: f"/ip4/11.77.1.1/tcp/31337/p2p/{RELAY}"} == OWN_RELAYS


def test_a_circuit_through_an_own_relay_uses_the_address_the_node_knows():
    written = f"/ip4/6.6.6.6/tcp/22/p2p/{RELAY}/p2p-circuit/p2p/{HOME}"  # the peer names a victim's address
    assert circuits_to_dial([written], OWN_RELAYS, set()) == [f"/ip4/11.77.1.1/tcp/31337/p2p/{RELAY}/p2p-circuit"]


def test_a_circuit_through_a_member_is_dialled_and_through_a_stranger_is_not():
    through_member = f"/ip4/198.51.100.4/tcp/4001/p2p/{MEMBER_RELAY}/p2p-circuit"
    through_stranger = f"/ip4/198.51.100.5/tcp/4001/p2p/{STRANGER}/p2p-circuit/p2p/{HOME}"
    chosen = circuits_to_dial([through_member, through_stranger, through_member], OWN_RELAYS, {MEMBER_RELAY, HOME})
    assert chosen == [through_member]
    assert circuits_to_dial(["/ip4/1.2.3.4/tcp/1", "garbage", ""], OWN_RELAYS, {MEMBER_RELAY}) == []


@pytest.mark.parametrize("text", [
    f"/ip4/11.77.1.1/tcp/41929/p2p/{RELAY}/p2p-circuit",
    f"/ip6/2001:db8::7/udp/4001/quic-v1/p2p/{MEMBER_RELAY}/p2p-circuit",
    f"/dns4/relay.example.org/tcp/443/wss/p2p/{RELAY}/p2p-circuit",
])
def test_the_binary_form_is_libp2ps(text):
    data = maddr_bytes(text)
    peer = RELAY if RELAY in text else MEMBER_RELAY
    multihash = PeerID.from_base58(peer).to_bytes()  # libp2p's form of a peer id: its multihash
    assert bytes([0xA5, 0x03, len(multihash)]) + multihash + bytes([0xA2, 0x02]) == data[-len(multihash) - 5:]
    if text.startswith("/ip4/"):
        assert data[:9] == bytes([0x04, 11, 77, 1, 1, 0x06]) + (41929).to_bytes(2, "big") + b"\xa5"


@pytest.mark.parametrize("text", ["ip4/1.2.3.4", "/ip4/1.2.3.400/tcp/1", "/ip4/1.2.3.4/tcp/70000", "/sctp/1",
                                  "/ip4", "/p2p/0OIl", "/ip6/zz::1"])
def test_what_it_cannot_encode_is_a_value_error(text):
    with pytest.raises(ValueError):
        maddr_bytes(text)
