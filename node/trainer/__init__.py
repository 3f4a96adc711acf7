"""ftis.node.trainer: one F-TIS optimizer step on a round's groups.

Files:
- ``groups.py``    ``TrainingGroup``: completions with this node's rewards and the filter flag; advantage groups.
- ``packing.py``   groups -> tensors (each distinct prompt once, completions in length buckets), and micro-batches
                   of whole advantage groups.
- ``wire_groups.py`` a wire batch's groups -> training groups with this node's rewards (decode, gold answer, task).
- ``peer_selection.py`` ``select_peer_groups``: the peers' groups (``DatedGroup``) a step trains on, fair across peers.
- ``advantage_groups.py`` ``merge_shared``: nodes' groups for one shared prompt become one advantage group.
- ``logprobs.py``  per-token log-probs of completion tokens at the sampler's temperature.
- ``trainer.py``   ``Trainer.step``: forward, loss variant, backward per micro-batch, clip, AdamW.
- ``loss_params.py`` ``loss_params``: ``[loss]`` as the loss takes it, g at the step's point of its schedule.
- ``step_metrics.py`` ``StepMetrics``: the step's figures, each declared once with where it goes (add a metric here).
"""
