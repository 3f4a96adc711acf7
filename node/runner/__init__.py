"""ftis.node.runner: a node's rounds, put together from the parts.

Files:
- ``scoring.py``  this node's rewards for any batch's groups (decode, gold answer, task reward).
- ``node.py``     ``Node.run_round``: generate, publish, collect, score, mix, one F-TIS step.
"""
