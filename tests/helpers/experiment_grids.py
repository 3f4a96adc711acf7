"""The ``[quick]`` section the test grids share: one seed, one round, the smallest evaluation and warm-up."""

QUICK = """
[quick]
seeds = 1
rounds = 1
eval_every = 1
eval_problems = 2
warmup_steps = 1
"""
