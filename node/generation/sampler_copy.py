"""The sampler's own copy of a policy, in fewer bits (``[generation] weights``, transformers backend).

    copy = SamplerCopy(policy.model, "bfloat16")   # copy.model samples
    copy.refresh()                                 # after a step: the weights that train, taken again

- ``"bfloat16"``: the whole model in bfloat16 (weights and activations; the logits come back in float32). On a CPU
  with bfloat16 matrix units, a product runs ~3x faster than in float32, and the model's answers stay its own
  (Gemma 3 270M, greedy on 128 arithmetic problems: 11.7% against 13.3% in float32).
- ``"int8"``: every ``nn.Linear`` (the output layer included) a dynamic int8 linear layer: int8 weights, each input
  quantized to int8 on the fly, the product accumulated in int32 (torch's ``quantize_dynamic``, fbgemm kernels on
  x86). The embedding table is shared with the trainer's model rather than copied (it is only read). It costs some
  models their answers: Gemma 3 270M 13.3% → 2.3% on the same problems, whichever layers were left out; the tiny
  models and SmolLM2 keep more (docs/node.md).

A LoRA adapter is merged into its base layers first, so the copy is one plain model. ``refresh`` touches only what
a step can change: the linear layers whose weight trains (every one under full fine-tuning; under LoRA the adapted
ones, base weight plus the adapter's product), converted again in place exactly as the first copy was, and the
other weights that train (norms, an embedding that trains) copied over. Frozen layers keep what they hold: under
LoRA, Gemma 3's output layer (262,144 × 640, most of the model) is converted once.

The copy is another policy than the one being trained: the sampler's recorded log-probs are the copy's own (they
come from its logits), and the trainer's importance weight π_θ / π_sample corrects the difference, as it does for
a peer's samples (docs/loss.md). The trainer's model is never touched.
"""

import copy
import warnings
from collections.abc import Callable

import torch
from torch import Tensor, nn

COPIES = ("bfloat16", "int8")  # the [generation] weights that make a copy ("float32" samples the model itself)
_DEPRECATED = ".*(quantization is deprecated|quantized tensor creation).*"  # said once per process: docs/node.md
Read = Callable[[], tuple[Tensor, Tensor | None]]  # a linear layer's current float weight and bias


def sampler_copy(model: nn.Module, weights: str) -> nn.Module:
    """A ``weights`` copy of ``model`` for sampling, in eval mode (sampling runs without gradients)."""
    return SamplerCopy(model, weights).model


class SamplerCopy:
    """``model``: the ``weights`` copy of a trainer's model; ``refresh()`` brings it to the trainer's weights."""

    def __init__(self, trainer: nn.Module, weights: str):
        if weights not in COPIES:
            raise ValueError(f"weights must be one of {', '.join(COPIES)}, not {weights!r}")
        self.weights = weights
        embeddings = trainer.get_input_embeddings() if hasattr(trainer, "get_input_embeddings") else None
        # int8 reads the float table as it is (Gemma's is 670 MB in float32): the memo hands deepcopy the table itself
        memo = {id(embeddings.weight): embeddings.weight} if weights == "int8" and embeddings is not None else {}
        parameters = (parameter for _, parameter in trainer.named_parameters(remove_duplicate=False))
        originals = {id(obj): obj for obj in [*trainer.modules(), *parameters]}
        adapters = {id(module.base_layer): module for module in trainer.modules()
                    if hasattr(module, "lora_A") and hasattr(module, "base_layer")}  # base layer -> its LoRA layer
        with torch.no_grad():
            sampled = copy.deepcopy(trainer, memo=memo)  # memo: id(the trainer's object) -> its copy
            source = {id(copied): originals[key] for key, copied in memo.items() if key in originals}
            if hasattr(sampled, "merge_and_unload"):  # a peft model: its adapter merged into the copy's base layers
                sampled = sampled.merge_and_unload()
            sampled.eval()  # the copy's modules only: the trainer's model keeps its mode, and a shared table trains
            linears = {name: source.get(id(module)) for name, module in sampled.named_modules()
                       if type(module) is nn.Linear}
            in_linears = {id(parameter) for name in linears
                          for parameter in sampled.get_submodule(name).parameters(recurse=False)}
            self._floats = [(parameter, source[id(parameter)]) for parameter in sampled.parameters()
                            if id(parameter) not in in_linears and source.get(id(parameter)) is not None
                            and source[id(parameter)] is not parameter and source[id(parameter)].requires_grad]
            if weights == "int8":
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", message=_DEPRECATED)
                    from torch.ao.quantization import quantize_dynamic

                    sampled = quantize_dynamic(sampled, {nn.Linear}, dtype=torch.qint8, inplace=True)
            else:
                sampled = sampled.to(torch.bfloat16)
        self.model = sampled
        self._linears = [(self.model.get_submodule(name), read) for name, original in linears.items()
                         if (read := _trained(original, adapters)) is not None]

    def refresh(self) -> None:
        """Convert again every layer whose weight trains and copy the other trained weights: afterwards the copy is
        what ``SamplerCopy`` of the trainer's model would make now."""
        with torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_DEPRECATED)
            for target, original in self._floats:
                target.copy_(original)
            for layer, read in self._linears:
                weight, bias = read()
                if self.weights == "int8":
                    layer.set_weight_bias(_quantized(weight), bias)
                else:
                    layer.weight.copy_(weight)
                    if bias is not None:
                        layer.bias.copy_(bias)


def _trained(original: nn.Module | None, adapters: dict[int, nn.Module]) -> Read | None:
    """How to read the float weight and bias a copy's linear layer stands for, or None when they never change: a LoRA
    layer's base weight plus its active adapters' products; a plain layer's own while it trains."""
    if original is None:
        return None
    lora = adapters.get(id(original))
    if lora is not None:
        names = [name for name in lora.active_adapters if name in lora.lora_A]
        if not any(parameter.requires_grad for name in names for parameter in lora.lora_A[name].parameters()):
            return None
        return lambda: (original.weight + sum(lora.get_delta_weight(name) for name in names), original.bias)
    if not any(parameter.requires_grad for parameter in original.parameters()):
        return None
    return lambda: (original.weight, original.bias)


def _quantized(weight: Tensor) -> Tensor:
    """``weight`` quantized as ``quantize_dynamic`` quantizes a linear layer's (its default observer)."""
    from torch.ao.quantization import default_dynamic_qconfig

    observer = default_dynamic_qconfig.weight()
    observer(weight)
    scale, zero_point = observer.calculate_qparams()
    return torch.quantize_per_tensor(weight.float(), float(scale), int(zero_point), torch.qint8)
