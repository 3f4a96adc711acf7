"""ftis.node.intake: peers' batches into the groups a node's step trains on, the only way they enter a round.

Files:
- ``intake.py``         ``Intake``: collect the peers' batches, admit and score them, mix them with the own groups,
                        judge the peers by what the step found.
- ``admission.py``      ``Admission``: the door, from a batch's shape alone: completions no longer than this node
                        samples, a step's budget of peers' completions to score (per peer and in all).
- ``scoring.py``        ``score_batch``: a wire batch's groups -> training groups with this node's rewards (decode,
                        the gold answer this node trusts, its task); ``decode_groups`` for decoding ahead.
- ``text_groups.py``    ``Retokenizer``: a group of another tokenizer rebuilt from its texts in this node's tokens.
- ``rounds_barrier.py`` rounds mode: the wait for peers' batches of the same round, later rounds held, catching up.
- ``peer_selection.py`` ``select_peer_groups``: the peers' groups (``DatedGroup``) a step trains on, fair across peers.
- ``grouping.py``       vertical or horizontal grouping: a round's prompts, group ids, and the step's groups.
- ``shared_prompts.py`` horizontal grouping: the round's shared prompts and their group ids, the same on every node.
- ``shared_groups.py``  ``merge_shared``: nodes' groups of one shared prompt become one advantage group.
"""

from ftis.node.intake.intake import Collected, Intake, PeerGroups

__all__ = ["Collected", "Intake", "PeerGroups"]
