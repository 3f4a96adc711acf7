"""ftis.node.swarm.exchange: what every transport does with batches, whatever carries them: the receive policy
and this node's own batches.

Files:
- ``inbox.py``        the receive policy (age, run, tokenizer, quotas, once only) and the check of a fetched payload
                      against its announcement.
- ``charges.py``      what the inbox holds and counts: each batch charged to its peer's quota and the buffer's
                      bytes (``Charges``), each refusal counted by peer and reason (``Tally``).
- ``limits.py``       ``InboxLimits``: what a node fetches and holds of its peers' batches, from ``[swarm]``.
- ``reasons.py``      why a batch was refused or counted against its peer (``PEER_FAULTS``, ``WAITING``).
- ``payload.py``      a fetched payload checked against its announcement (size, SHA-256) and opened.
- ``budget.py``       the fetch budget: which announced batches to fetch now (freshest, better-scored, one a peer).
- ``seen.py``         the inbox's seen set: each (peer, round) answered once, bounded, pruned in order.
- ``outbox.py``       this node's recent encoded batches and the announcement listing them.
"""
