"""ftis.node.swarm.peers: what a node thinks of its peers.

Files:
- ``reputation.py``  per-peer scores from delivered, refused, failed and divergence-filtered batches, and mutes for
                     the peers that score too low.
- ``peer_rounds.py``  each peer's newest round delivered and announced (rounds mode).
- ``peer_view.py``   a node's scores of its peers in ``DIR/peers.json``, for ``status --node`` and the dashboard.
"""
