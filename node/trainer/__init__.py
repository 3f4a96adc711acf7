"""ftis.node.trainer: one F-TIS optimizer step on a round's groups (made from peers' batches by ``intake/``).

Files:
- ``groups.py``    ``TrainingGroup``: completions with this node's rewards and the filter flag; advantage groups.
- ``packing.py``   groups -> tensors (each distinct prompt once, completions in length buckets), and micro-batches
                   within the token bound (whole advantage groups where they fit, else parts of one's rows).
- ``logprobs.py``  per-token log-probs of completion tokens at the sampler's temperature.
- ``trainer.py``   ``Trainer.step``: forward, loss variant, backward per micro-batch, clip, AdamW.
- ``loss_params.py`` ``loss_params``: ``[loss]`` as the loss takes it, g at the step's point of its schedule.
- ``step_figures.py`` ``StepFigures``: the step's figures, each declared once with where it goes (add a metric here).
"""
