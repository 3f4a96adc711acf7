"""The sampler's int8 copy of a policy (``[generation] weights = "int8"``, transformers backend).

    sampled = int8_copy(policy.model)   # again after every step: the copy does not follow the trainer

Every ``nn.Linear`` of a copy of the model (the output layer included) becomes a dynamic int8 linear layer: its
weights stored as int8, each input quantized to int8 on the fly, the product accumulated in int32 (torch's
``quantize_dynamic``, fbgemm kernels on x86). A LoRA adapter is merged into its base layers first, so the copy is one
plain model. The embedding table is shared with the trainer's model rather than copied (it is only read).

The copy is another policy than the one being trained: the sampler's recorded log-probs are the copy's own (they
come from its logits), and the trainer's importance weight π_θ / π_sample corrects the difference, as it does for
a peer's samples (docs/loss.md). The trainer's model is never touched.
"""

import copy
import warnings

import torch
from torch import nn
from torch.ao.quantization import quantize_dynamic


def int8_copy(model: nn.Module) -> nn.Module:
    """A weight-quantized copy of ``model`` for sampling, in eval mode (sampling runs without gradients)."""
    shared = {}
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embeddings is not None:  # read only: not worth a copy (Gemma's is 670 MB in float32)
        shared[id(embeddings.weight)] = embeddings.weight
    with torch.no_grad():
        sampled = copy.deepcopy(model, memo=shared)
        if hasattr(sampled, "merge_and_unload"):  # a peft model: its adapter merged into the copy's base layers
            sampled = sampled.merge_and_unload()
        sampled.eval()  # the copy's modules only: the trainer's model keeps its mode, and its shared table trains
        with warnings.catch_warnings():  # torch calls this API deprecated, once per process: said in docs/node.md
            warnings.filterwarnings("ignore", message=".*(quantization is deprecated|quantized tensor creation).*")
            return quantize_dynamic(sampled, {nn.Linear}, dtype=torch.qint8)
