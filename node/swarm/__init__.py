"""ftis.node.swarm: finding peers and exchanging rollout batches with them (docs/swarm.md).

Files:
- ``transport.py``          the ``Transport`` interface the node uses, and what it returns.
- ``transport_base.py``     what every transport does alike with its inbox and outbox: publish, receive,
                            members, stats, scores, and a fetched payload opened, charged and counted.
- ``memory.py``             ``MemoryTransport``: peers in one process (tests, demos).
- ``hivemind_transport.py`` ``HivemindTransport``: signed DHT announcements, payloads over P2P streams; it starts
                            the DHT and the network loop, and puts together the four parts below.
- ``hivemind_announce.py``  announcing this node's batches: its signed record, renewed, and how peers reach it.
- ``hivemind_fetch.py``     reading the directory and fetching peers' batches (deadlines, retries, resumed streams).
- ``hivemind_serve.py``     serving this node's batches to the peers that fetch them.
- ``hivemind_stream.py``    the stream exchange between a fetcher and the peer serving it.
- ``dht_calls.py``          calls into hivemind's DHT process under a deadline; a lost one is a counted failure.
- ``inbox.py``              the receive policy both apply (age, run, tokenizer, quotas, once only) and
                            the check of a fetched payload against its announcement.
- ``seen.py``               the inbox's seen set: each (peer, round) answered once, bounded, pruned in order.
- ``peer_rounds.py``        each peer's newest round delivered and announced (rounds mode).
- ``reputation.py``         per-peer scores from delivered, refused, failed and divergence-filtered
                            batches, and mutes for the peers that score too low.
- ``peer_view.py``          a node's scores of its peers in ``DIR/peers.json``, for ``status --node``.
- ``outbox.py``             this node's recent encoded batches and the announcement listing them.
- ``records.py``            the run's sharded DHT keys and the signature + schema validators.
- ``directory.py``          reading shard keys in one DHT traversal; which announcements count.
- ``sampling.py``           which shards a poll reads (all, or the next few of the node's own order), what the
                            last polls returned, and the fetch budget: the freshest batches from distinct peers.
- ``identity.py``           identity files: one key for the peer id and the announcement signature.
- ``bootstrap.py``          ``ftis-node bootstrap``: a DHT-only entry peer that logs what it sees.
- ``status.py``             the members table ``ftis-node status`` prints (with a node's scores: ``--node``).
- ``reachability.py``       ``[swarm] reachability`` and the relay settings as p2pd options; how peers reach us.
- ``p2pd_metrics.py``       libp2p's own counters (AutoNAT, relay slots, relayed bytes) read from ``p2pd``.
- ``circuits.py``           which circuit addresses to dial a relayed member at, in libp2p's binary form.
- ``listen_ports.py``      whether the ports a node is told to listen on are free, before its DHT starts.
- ``mounts.py``            which mount a folder is on: an anonymous container volume is refused for an identity.
- ``slots.py``              fair fetch and serve slots (at most 2 per peer).

Importing ``hivemind`` costs about 3 s (it imports torch): only the hivemind-based modules do.
"""
