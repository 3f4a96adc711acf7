"""ftis.node.runner: a node's rounds, put together from the parts.

Files:
- ``scoring.py``  this node's rewards for any batch's groups (decode, gold answer, task reward).
- ``node.py``     ``Node.run_round``: generate, publish, collect, score, mix, one F-TIS step.
- ``overlap.py``  the join loop's helper threads: a round's publish and its peers' decoding overlap its compute.
- ``horizontal.py`` horizontal grouping: the round's shared prompts and their group ids, later rounds held.
- ``rng.py``        the random states a node draws from (its numpy generator, python, torch CPU/CUDA).
- ``checkpoint.py`` checkpoints: atomic write, verified read, keep-last-K, resume refused for another model.
- ``keeper.py``     when a running node checkpoints, exports its model and resumes (``[checkpoint]``).
- ``metrics.py``    the per-step record and where it goes: ``metrics.jsonl``, TensorBoard events.
- ``writer.py``     background threads for those files and the round's publish, in order; errors reach the loop.
- ``utilisation.py`` where a round's wall time goes (generating, training, the rest): the node's utilisation.
- ``display.py``    the terminal: a live rich table, or one summary line per step off a terminal.
- ``evaluation.py`` ``evaluate``: greedy accuracy on a held-out split, the fixed problem set, ``EvalResult``.
- ``periodic_eval.py`` evaluation inside the join loop (``[eval]``): when, and its ``metrics.jsonl`` records.
- ``eval_command.py`` ``ftis-node eval``: load a model or export, evaluate with a progress bar, print.
"""
