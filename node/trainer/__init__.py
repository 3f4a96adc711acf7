"""ftis.node.trainer: one F-TIS optimizer step on a round's groups.

Files:
- ``groups.py``    ``TrainingGroup``: completions with this node's rewards and the filter flag; advantage groups.
- ``packing.py``   groups -> right-padded tensors, and micro-batches of whole advantage groups.
- ``mix.py``       ``select_peer_groups``: the peers' groups a step trains on, fair across peers.
- ``horizontal.py`` ``merge_shared``: nodes' groups for one shared prompt become one advantage group.
- ``logprobs.py``  per-token log-probs of completion tokens at the sampler's temperature.
- ``trainer.py``   ``Trainer.step``: forward, loss variant, backward per micro-batch, clip, AdamW.
- ``step_metrics.py`` ``StepMetrics``: the step's figures, each declared once with where it goes (add a metric here).
"""
