"""ftis.node.runner: a node's rounds, put together from the parts, and the loop that runs them.

Files:
- ``node.py``     ``Node.run_round``: generate and score the own groups, publish, the peers' groups through
                  ``intake/``, one F-TIS step.
- ``helper_threads.py`` work a round hands to helper threads: its publish and its peers' decoding overlap its compute.
- ``rng.py``        the random states a node draws from (its numpy generator, python, torch CPU/CUDA).
- ``join.py``       ``ftis-node join``: ``build_node`` from a config, ``run_node``: the run loop, until stopped.
- ``folders.py``    the folders a node writes (``--out``, a new identity's), checked writable before it starts.
- ``checkpoint_files.py`` checkpoints: atomic write, verified read, keep-last-K, resume refused for another model.
- ``checkpointer.py`` ``Checkpointer``: when a running node checkpoints, exports its model and resumes.
- ``alone.py``      the run loop's warning that no peer has been seen for a while: the node trains alone.
- ``mutes.py``      the run loop's line for each new mute of a peer, with its likely reason.

How peers' batches become groups to train on is ``intake/``; what a round reports and the loop writes and shows
(``RoundReport``, ``metrics.jsonl``, the display) is ``records/``; the greedy evaluation, periodic or
``ftis-node eval``, is ``evaluation/``.
"""
