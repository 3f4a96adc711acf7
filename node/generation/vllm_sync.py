"""Bringing the vLLM engine's weights to the trainer's after an optimizer step.

    sync = FullWeightSync(llm, policy.model)          # or LoraWeightSync(llm, policy.model, scratch, LoRARequest)
    sync.sync(policy_version=7)
    llm.generate(prompts, params, lora_request=sync.lora_request)

- **Full fine-tuning**: the trainer's parameters go straight into the engine's model, in place, through
  the worker's ``reload_weights`` (``LLM.collective_rpc``), vLLM's own in-place reload: it puts each layer
  back in checkpoint form, runs the model's ``load_weights`` (the checkpoint loader: it maps Hugging Face
  names onto vLLM's fused layers, e.g. q/k/v onto ``qkv_proj``, and casts to the engine's dtype), then the
  platform's and quantization's weight processing again, and copies the result into the tensors the
  kernels already hold. Calling ``load_weights`` directly is not enough where that processing replaced
  the loaded parameters (vLLM's CPU backend packs every linear weight for oneDNN and drops its loader):
  it is only the fallback for a vLLM whose worker has no ``reload_weights``, run by ``LLM.apply_model``.
  In-process (``vllm_engine.py``) either is a GPU-to-GPU copy: nothing is written to disk. Parameters are
  named as ``named_parameters()`` gives them — tied embeddings once, as a checkpoint holds them.
- **LoRA**: the base never changes; the adapter of each version is written (``save_pretrained``, into a
  hidden folder then renamed) to ``scratch/lora-v<version>``, registered with the engine under a new
  integer id (``LoRARequest``: vLLM caches adapters by id, so a reused id would serve the old weights),
  and the previous one is removed from the engine and the disk.

Either way the engine's prefix cache is then reset: cached KV blocks were computed with the old weights.
"""

import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import torch

from ftis.node.generation.types import WeightSyncError


class FullWeightSync:
    """Copies every parameter of the trainer's model into the engine's model."""

    lora_request = None  # full fine-tuning generates with the engine's own weights

    def __init__(self, llm: Any, model: torch.nn.Module):
        self.llm, self.model = llm, model
        self.in_place_reload: bool | None = None  # whether the worker has reload_weights; asked at the first sync
        self.loaded_names = 0  # engine parameters the last fallback sync wrote (as vLLM's loader reports them)

    def sync(self, policy_version: int) -> None:
        weights = [(name, parameter.detach()) for name, parameter in self.model.named_parameters()]
        try:
            if self.in_place_reload is None:
                self.in_place_reload = all(self.llm.collective_rpc(_has_reload_weights))
            if self.in_place_reload:
                self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights),
                                                                  "is_checkpoint_format": True})
                self.llm.apply_model(_reprocess_tied_head)
            else:
                self._load_directly(weights, policy_version)
        except WeightSyncError:
            raise
        except Exception as error:  # whatever the loader raises, the engine now holds unknown weights
            raise WeightSyncError(f"loading policy v{policy_version}'s weights into vLLM failed: {error}") from error
        reset_prefix_cache(self.llm, policy_version)

    def _load_directly(self, weights: list[tuple[str, torch.Tensor]], policy_version: int) -> None:
        results = self.llm.apply_model(lambda engine_model: _load_weights(engine_model, weights))
        loaded = results[0] if results else None
        if isinstance(loaded, set):  # vLLM's loaders report the parameters they wrote
            if not loaded:
                raise WeightSyncError(f"vLLM's loader took none of the {len(weights)} weights of policy "
                                      f"v{policy_version} (names it does not know?)")
            self.loaded_names = len(loaded)

    def close(self) -> None:
        pass


def _has_reload_weights(worker: Any) -> bool:
    """Runs inside the engine (``collective_rpc``): whether this vLLM's worker reloads weights in place."""
    return callable(getattr(worker, "reload_weights", None))


def _reprocess_tied_head(engine_model: torch.nn.Module) -> bool:
    """Runs inside the engine (``apply_model``) after ``reload_weights``: a head tied to the embeddings gets no
    weight of its own from the checkpoint loader, so the reload puts the head's processed tensors back as they
    were. Where the platform keeps a processed copy of it (vLLM's CPU backend packs it for oneDNN), that copy
    still holds the old embeddings: process the head again from the (shared, now new) weight. A no-op where
    the processing is (CUDA, unquantized)."""
    head = getattr(engine_model, "lm_head", None)
    method = getattr(head, "quant_method", None)
    if method is None or not getattr(getattr(engine_model, "config", None), "tie_word_embeddings", False):
        return False
    method.process_weights_after_loading(head)
    return True


def _load_weights(engine_model: torch.nn.Module, weights: list[tuple[str, torch.Tensor]]) -> Any:
    """Runs inside the engine (``apply_model``): its model's checkpoint loader over the trainer's tensors."""
    with torch.no_grad():
        return engine_model.load_weights(iter(weights))


class LoraWeightSync:
    """Hands the engine the adapter of each policy version, as a new LoRA under a new id."""

    def __init__(self, llm: Any, model: Any, scratch: Path, lora_request_class: type):
        self.llm, self.model, self.scratch, self._request_class = llm, model, scratch, lora_request_class
        self.lora_request: Any = None  # the current version's LoRARequest; None before the first sync
        self._next_id = 1  # vLLM wants ids ≥ 1, unique per adapter

    def sync(self, policy_version: int) -> None:
        folder = self.scratch / f"lora-v{policy_version:08d}-{self._next_id}"
        self._write_adapter(folder)
        request = self._request_class(lora_name=f"ftis-v{policy_version}", lora_int_id=self._next_id,
                                      lora_path=str(folder))
        self._next_id += 1
        previous = self.lora_request
        engine = self.llm.llm_engine
        if previous is not None:
            engine.remove_lora(previous.lora_int_id)  # max_loras = 1: make room before adding
            shutil.rmtree(previous.lora_path, ignore_errors=True)  # out of the engine: nothing reads it again
        self.lora_request = None
        try:
            added = engine.add_lora(request)  # loads it now, so a broken adapter fails here and not mid-generation
        except Exception as error:
            added = error
        if added is not True:
            shutil.rmtree(folder, ignore_errors=True)
            raise WeightSyncError(f"vLLM refused the LoRA adapter of policy v{policy_version}"
                                  f"{': ' + str(added) if isinstance(added, Exception) else ''}")
        self.lora_request = request
        reset_prefix_cache(self.llm, policy_version)

    def _write_adapter(self, folder: Path) -> None:
        staging = folder.with_name(f".{folder.name}.tmp-{uuid.uuid4().hex[:8]}")
        try:
            # save_embedding_layers=False: "auto" asks the hub whether the vocabulary changed; this LoRA never
            # adapts the embeddings, and the node may be offline.
            self.model.save_pretrained(staging, save_embedding_layers=False)
            staging.rename(folder)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def close(self) -> None:
        if self.lora_request is not None:
            shutil.rmtree(self.lora_request.lora_path, ignore_errors=True)


def reset_prefix_cache(llm: Any, policy_version: int) -> None:
    """Empty the engine's prefix cache: its KV blocks were computed with the old weights, and a prompt that hit
    them would be read with those. vLLM answers False when it could not (requests still running)."""
    if llm.reset_prefix_cache() is False:
        raise WeightSyncError(f"vLLM could not empty its prefix cache for policy v{policy_version}")


def timed_sync(sync: FullWeightSync | LoraWeightSync, policy_version: int) -> float:
    """Run one sync; its seconds (on a GPU, after the copies have finished)."""
    started = time.perf_counter()
    sync.sync(policy_version)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - started
