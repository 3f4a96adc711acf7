"""Dialling a member that is reached through relays, at the circuit addresses its signed announcement lists.

A fetch opens a stream to a peer id, and ``p2pd`` must know an address for it: one it is connected to, or one its
peer routing finds. Measured across the NAT test's namespaces: a node behind a NAT is found by neither (``Connect
failed. msg=routing: not found``) unless it happened to dial the fetcher itself. So before fetching from a member
that announces itself relayed, the node hands ``p2pd`` that member's circuit addresses (``connect``).

Which ones (``circuits_to_dial``): a circuit goes through a relay, and the node dials a relay only at an address
it knows itself when it can. Through one of its own relays (``[swarm] relays``, else its initial peers) it uses
the address it was given for that relay and ignores the one the peer wrote; through another relay, only when that
relay is a member the node has read a signed announcement of, at the peer's address (at most ``MAX_RELAY_ADDRS``
per member, only when a fetch from it is due); any other circuit is not dialled. A false address costs its author
its own batches' reach; what it can make others do is a bounded number of dial attempts to the address it wrote,
each ending at the handshake (the relay's peer id must answer), and addresses kept for minutes in their p2pd.

The binary form is written here (``maddr_bytes``): hivemind's multiaddr encodes ``/p2p/<id>`` as a CID, which
``p2pd`` refuses ("length greater than remaining number of bytes in buffer"); libp2p's form is the multihash.
"""

from collections.abc import Iterable, Mapping

from ftis.protocol.announcement import relay_of

_CIRCUIT = "/p2p-circuit"
_BASE58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
# protocol -> (code, value): "ip4", "ip6", "port" (uint16 big-endian), "text" (length-prefixed UTF-8), "peer"
# (length-prefixed multihash from base58), None (no value)
_PROTOCOLS = {
    "ip4": (0x04, "ip4"), "ip6": (0x29, "ip6"), "tcp": (0x06, "port"), "udp": (0x0111, "port"),
    "dns": (0x35, "text"), "dns4": (0x36, "text"), "dns6": (0x37, "text"), "p2p": (0x01A5, "peer"),
    "quic": (0x01CC, None), "quic-v1": (0x01CD, None), "ws": (0x01DD, None), "wss": (0x01DE, None),
    "tls": (0x01C0, None), "noise": (0x01C6, None), "p2p-circuit": (0x0122, None),
}  # fmt: skip


class Encoded:
    """A multiaddr already in libp2p's binary form, for hivemind's daemon client (it calls ``to_bytes``)."""

    def __init__(self, data: bytes):
        self._data = data

    def to_bytes(self) -> bytes:
        return self._data


def circuits_to_dial(addrs: Iterable[str], own_relays: Mapping[str, str], members: set[str]) -> list[str]:
    """The circuit addresses to dial a relayed member at (see the module's docstring), target part left off.

    ``own_relays``: this node's relays, peer id -> full multiaddr (ending ``/p2p/<id>``); ``members``: peer ids
    of members with a valid signed announcement now."""
    chosen: list[str] = []
    for addr in addrs:
        try:
            relay = relay_of(addr)
        except ValueError:
            continue
        if relay in own_relays:
            circuit = own_relays[relay] + _CIRCUIT
        elif relay in members:
            circuit = addr[: addr.index(_CIRCUIT) + len(_CIRCUIT)]
        else:
            continue
        if circuit not in chosen:
            chosen.append(circuit)
    return chosen


def relay_ids(relays: Iterable[str]) -> dict[str, str]:
    """This node's relays by peer id (a multiaddr without a ``/p2p/<id>`` at its end is left out)."""
    known = {}
    for maddr in relays:
        head, _, peer = maddr.rstrip("/").rpartition("/p2p/")
        if head and peer and "/" not in peer:
            known[peer] = maddr.rstrip("/")
    return known


def maddr_bytes(text: str) -> bytes:
    """libp2p's binary form of a multiaddr in text form (``ValueError`` for what it cannot encode)."""
    parts = text.split("/")
    if len(parts) < 2 or parts[0] != "":
        raise ValueError(f"a multiaddr starts with '/': {text!r}")
    out, i = bytearray(), 1
    while i < len(parts):
        name = parts[i]
        if name not in _PROTOCOLS:
            raise ValueError(f"cannot encode /{name} in {text!r}")
        code, kind = _PROTOCOLS[name]
        out += _varint(code)
        if kind is not None:
            if i + 1 >= len(parts):
                raise ValueError(f"/{name} needs a value in {text!r}")
            out += _value(kind, parts[i + 1])
            i += 1
        i += 1
    return bytes(out)


def _value(kind: str, text: str) -> bytes:
    if kind == "ip4":
        octets = [int(part) for part in text.split(".")]
        if len(octets) != 4 or not all(0 <= octet <= 255 for octet in octets):
            raise ValueError(f"not an IPv4 address: {text!r}")
        return bytes(octets)
    if kind == "ip6":
        import ipaddress

        return ipaddress.IPv6Address(text).packed
    if kind == "port":
        port = int(text)
        if not 0 <= port <= 65535:
            raise ValueError(f"not a port: {text!r}")
        return port.to_bytes(2, "big")
    data = text.encode() if kind == "text" else _base58(text)
    return _varint(len(data)) + data


def _base58(text: str) -> bytes:
    number = 0
    for char in text:
        digit = _BASE58.find(char)
        if digit < 0:
            raise ValueError(f"not base58: {text!r}")
        number = number * 58 + digit
    body = number.to_bytes((number.bit_length() + 7) // 8, "big") if number else b""
    return b"\x00" * (len(text) - len(text.lstrip("1"))) + body


def _varint(number: int) -> bytes:
    out = bytearray()
    while True:
        byte, number = number & 0x7F, number >> 7
        out.append(byte | (0x80 if number else 0))
        if not number:
            return bytes(out)
