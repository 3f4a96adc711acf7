"""ftis.node.runner: a node's rounds, put together from the parts.

Files:
- ``node.py``     ``Node.run_round``: generate, publish, collect, score, mix, one F-TIS step.
- ``round_report.py`` ``RoundReport``: a round's figures, each declared once with where it goes (add a metric here).
- ``rounds_barrier.py`` rounds mode: the wait for peers' batches of the same round, later rounds held, catching up.
- ``grouping.py`` vertical or horizontal grouping: a round's prompts, group ids, and the step's advantage groups.
- ``shared_prompts.py`` horizontal grouping: the round's shared prompts and their group ids, the same on every node.
- ``helper_threads.py`` work a round hands to helper threads: its publish and its peers' decoding overlap its compute.
- ``rng.py``        the random states a node draws from (its numpy generator, python, torch CPU/CUDA).
- ``checkpoint.py`` checkpoints: atomic write, verified read, keep-last-K, resume refused for another model.
- ``checkpointer.py`` ``Checkpointer``: when a running node checkpoints, exports its model and resumes.
- ``metrics.py``    the per-step record and where it goes: ``metrics.jsonl``, TensorBoard events.
- ``record_kinds.py`` ``is_step``, ``is_evaluation``: the two kinds of ``metrics.jsonl`` line, for its readers.
- ``writer.py``     background threads for those files and the round's publish, in order; errors reach the loop.
- ``utilisation.py`` where a round's wall time goes (generating, training, the rest): the node's utilisation.
- ``display.py``    the terminal: a live rich table, or one summary line per step off a terminal.
- ``evaluation.py`` ``evaluate``: greedy accuracy on a held-out split, the fixed problem set, ``EvalResult``.
- ``periodic_eval.py`` evaluation inside the join loop (``[eval]``): when, and its ``metrics.jsonl`` records.
- ``eval_command.py`` ``ftis-node eval``: load a model or export, evaluate with a progress bar, print.
"""
