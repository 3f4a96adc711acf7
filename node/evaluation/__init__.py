"""ftis.node.evaluation: a policy's greedy accuracy on a task's held-out problems.

Files:
- ``evaluation.py``    ``evaluate``: greedy accuracy on a held-out split, the fixed problem set, ``EvalResult``.
- ``periodic_eval.py`` evaluation inside the join loop (``[eval]``): when, and its ``metrics.jsonl`` records.
- ``eval_command.py``  ``ftis-node eval``: load a model or export, evaluate with a progress bar, print.
"""
