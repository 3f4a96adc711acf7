"""ftis.node.swarm: finding peers and exchanging rollout batches with them (docs/swarm.md), in rooms by concern.

Files:
- ``transport.py``       the ``Transport`` interface the node uses, and what it returns.
- ``transport_base.py``  what every transport does alike with its inbox and outbox: publish, receive, members,
                         stats, scores, and a fetched payload opened, charged and counted.
- ``memory.py``          ``MemoryTransport``: peers in one process (tests, demos, the experiment's lockstep).
- ``bootstrap.py``       ``ftis-node bootstrap``: a DHT-only entry peer that logs what it sees.
- ``status.py``          ``ftis-node status``: the members table (with a node's scores: ``--node``).
- ``errors.py``          ``SwarmError``: the swarm could not be joined (below every room).
- ``exchange/``          the receive policy every transport applies (the inbox), and this node's own batches.
- ``dht/``               the hivemind transport: announcements in the DHT, payloads over P2P streams.
- ``reach/``             reachability behind NATs: relays, circuits, libp2p's counters, listen ports.
- ``peers/``             peer scores and mutes, each peer's rounds, and the view a node writes for ``status``.
- ``keys/``              identity files: the key behind a peer id, and where it may live.

A newcomer starts at ``transport.py`` (what a node asks of a swarm), then ``exchange/inbox.py`` (what it accepts
from one), then ``memory.py`` (the whole exchange in one process) before ``dht/``.
"""

