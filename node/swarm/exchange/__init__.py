"""ftis.node.swarm.exchange: what every transport does with batches, whatever carries them: the receive policy
and this node's own batches.

Files:
- ``inbox.py``        the receive policy (age, run, tokenizer, quotas, once only) and the check of a fetched payload
                      against its announcement.
- ``seen.py``         the inbox's seen set: each (peer, round) answered once, bounded, pruned in order.
- ``peer_rounds.py``  each peer's newest round delivered and announced (rounds mode).
- ``outbox.py``       this node's recent encoded batches and the announcement listing them.
"""
