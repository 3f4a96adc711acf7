"""ftis.node.swarm.dht: the hivemind transport: signed sharded DHT announcements, payloads over P2P streams.

Importing ``hivemind`` costs about 3 s (it imports torch): these modules do, the rest of the swarm does not.

Files:
- ``transport.py``  ``HivemindTransport``: it starts the DHT and the network loop, and puts together the parts below.
- ``announce.py``   announcing this node's batches: its signed record, renewed, and how peers reach it.
- ``fetch.py``      reading the directory and fetching peers' batches (deadlines, retries, resumed streams).
- ``serve.py``      serving this node's batches to the peers that fetch them.
- ``stream.py``     the stream exchange between a fetcher and the peer serving it.
- ``calls.py``      calls into hivemind's DHT process under a deadline; a lost one is a counted failure.
- ``records.py``    the run's sharded DHT keys and the signature + schema validators.
- ``directory.py``  reading shard keys in one DHT traversal; which announcements count.
- ``sampling.py``   which shards a poll reads (all, or the next few of the node's own order), and what the last
                    polls returned.
- ``slots.py``      fair fetch and serve slots (at most 2 per peer).
"""
