"""ftis.node.trainer: one F-TIS optimizer step on a round's groups.

Files:
- ``groups.py``    ``TrainingGroup``: completions with this node's rewards and the filter flag.
- ``packing.py``   groups -> right-padded tensors, and micro-batches of whole groups.
- ``logprobs.py``  per-token log-probs of completion tokens at the sampler's temperature.
- ``trainer.py``   ``Trainer.step``: forward, loss variant, backward per micro-batch, clip, AdamW.
"""
