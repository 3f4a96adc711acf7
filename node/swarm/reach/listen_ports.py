"""Whether the TCP ports a node is told to listen on (``host_maddrs``) are free, checked before its DHT starts.

p2pd reports a taken port only after its own start-up (up to ``start_timeout_s``), in its own words; this says
it at once and names the address: another node, a bootstrap or an old container still holds it. The check binds
and closes a socket with ``SO_REUSEADDR``, as p2pd binds, so a port whose last connections linger in TIME_WAIT
(a node just restarted) is free here as it is for p2pd. Addresses of other forms (port 0, UDP/QUIC, DNS names)
are left to p2pd.
"""

import errno
import socket
from collections.abc import Iterable

from ftis.node.swarm.errors import SwarmError

_FAMILIES = {"ip4": socket.AF_INET, "ip6": socket.AF_INET6}


def check_listen_ports(maddrs: Iterable[str]) -> None:
    """Raise ``SwarmError`` naming the first ``/ip4|ip6/<host>/tcp/<port>`` address whose port is taken."""
    for maddr in maddrs:
        parts = maddr.strip("/").split("/")
        if len(parts) < 4 or parts[0] not in _FAMILIES or parts[2] != "tcp" or not parts[3].isdigit():
            continue
        host, port = parts[1], int(parts[3])
        if port == 0:
            continue
        with socket.socket(_FAMILIES[parts[0]], socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind((host, port))
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    raise SwarmError(f"cannot listen on {maddr}: port {port} is taken (another node, a bootstrap "
                                     "or an old container holds it); stop it or choose another port with "
                                     "--host-maddrs") from None
                if error.errno == errno.EADDRNOTAVAIL:
                    raise SwarmError(f"cannot listen on {maddr}: {host} is not an address of this machine "
                                     "(--host-maddrs takes this machine's own addresses, or 0.0.0.0; a public "
                                     "address goes in --announce-maddrs)") from None
                raise SwarmError(f"cannot listen on {maddr}: {error.strerror}") from None
