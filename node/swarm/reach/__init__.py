"""ftis.node.swarm.reach: how peers reach this node and it them, behind NATs and through relays (docs/nat.md).

Files:
- ``reachability.py``  ``[swarm] reachability`` and the relay settings as p2pd options; how peers reach us.
- ``circuits.py``      which circuit addresses to dial a relayed member at, in libp2p's binary form.
- ``p2pd_metrics.py``  libp2p's own counters (AutoNAT, relay slots, relayed bytes) read from ``p2pd``.
- ``listen_ports.py``  whether the ports a node is told to listen on are free, before its DHT starts.
"""
