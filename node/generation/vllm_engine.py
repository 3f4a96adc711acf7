"""Starting the vLLM engine a ``VllmGenerator`` samples with: which vLLM, which options, from which folder.

    llm, vllm = start_engine(policy, VllmConfig(), scratch=Path("/tmp/x"), seed=0)

**Which sampler log-probs vLLM returns.** By default vLLM returns *raw* log-probs: log_softmax of the
model's logits before temperature, top-k and top-p. Those are the sampler's only at T = 1 with no
truncation. The engine option ``logprobs_mode="processed_logprobs"`` makes it return log_softmax of the
logits it actually sampled from: after temperature and the top-k / top-p masks (masked tokens at -inf,
the rest renormalised), in float32 — exactly ``draws.processed_logprobs``, the docs/loss.md definition of
``sampler_logprobs``. The option exists from vLLM 0.10.2 (0.10.0 and 0.10.1 knew only the raw modes), in
both of its samplers (the V1 ``TopKTopPSampler`` and Model Runner V2's); with it vLLM bypasses the
FlashInfer sampling kernel, which cannot return processed log-probs, for the PyTorch one. So vLLM older
than 0.10.2 is refused (``BackendUnavailableError``), and every engine is started with that mode.

**Why the engine runs in this process** (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, set before vLLM is
imported): full fine-tuning syncs weights by handing the trainer's GPU tensors to the engine's model
(``vllm_sync.py``); in-process that is a device-to-device copy with no serialisation. One GPU serves both,
so vLLM takes ``gpu_memory_utilization`` of it (weights and KV cache) and the trainer the rest.

**The folder it starts from.** The node's weights need not be any folder's (a tiny model built in code, a
warm start, a resumed checkpoint), so the engine starts from an export of the policy as it is now
(``export_policy`` into ``scratch/engine``): the model itself for full fine-tuning; for LoRA the frozen
base — the hub id when the base came from the hub, else the ``base/`` folder the export writes — and the
adapter is handed over separately, one folder per policy version.

Token ids go in and come out (``skip_tokenizer_init``): the engine never needs the tokenizer.
"""

import os
from pathlib import Path
from typing import Any

from ftis.node.config import VllmConfig
from ftis.node.generation.types import BackendUnavailableError

MIN_VLLM_VERSION = (0, 10, 2)  # the first release with logprobs_mode="processed_logprobs"
LOGPROBS_MODE = "processed_logprobs"
LORA_RANK_SLOTS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the values vLLM accepts for max_lora_rank
ENGINE_FOLDER = "engine"


def import_vllm() -> Any:
    """The ``vllm`` module, in-process mode set first; ``BackendUnavailableError`` when it is missing or too old."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # see the module docstring: weight sync needs it
    try:
        import vllm
    except ImportError as error:
        raise BackendUnavailableError(
            f"generation.backend = \"vllm\" needs vLLM, which is not installed here ({error}); on a GPU machine: "
            "pip install -e '.[vllm]', or use the GPU Docker image (docker/README.md)"
        ) from None
    found = _version_tuple(getattr(vllm, "__version__", "0"))
    if found < MIN_VLLM_VERSION:
        raise BackendUnavailableError(
            f"vLLM {vllm.__version__} is too old: sampler log-probs need logprobs_mode=\"processed_logprobs\", "
            f"which arrived in {'.'.join(map(str, MIN_VLLM_VERSION))}"
        )
    return vllm


def _version_tuple(text: str) -> tuple[int, ...]:
    """(0, 10, 2) for "0.10.2", "0.10.2rc1", "0.10.2+cu128" or "0.10.2.dev5"; unparsable parts end the tuple."""
    parts = []
    for piece in text.split("+")[0].split(".")[:3]:
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def lora_rank_slot(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds an adapter of rank ``rank``."""
    for slot in LORA_RANK_SLOTS:
        if rank <= slot:
            return slot
    raise BackendUnavailableError(f"LoRA rank {rank} is above vLLM's largest max_lora_rank ({LORA_RANK_SLOTS[-1]})")


def engine_model(policy: Any, scratch: Path, policy_version: int) -> tuple[str, str | None]:
    """(model, revision) the engine loads: an export of the policy's current weights (see the module docstring)."""
    from ftis.node.models import export_policy
    from ftis.node.models.loading import LORA_BASE_FOLDER

    folder = export_policy(policy, scratch / ENGINE_FOLDER, policy_version=policy_version)
    if policy.adapter == "full":
        return str(folder), None
    if policy.base_model_id is not None:
        return policy.base_model_id, policy.revision
    return str(folder / LORA_BASE_FOLDER), None


def engine_options(settings: VllmConfig, seed: int, lora_rank: int | None) -> dict[str, Any]:
    """The ``LLM(...)`` keyword arguments besides the model (every one an ``EngineArgs`` field)."""
    options: dict[str, Any] = {
        "skip_tokenizer_init": True,
        "dtype": settings.dtype,
        "gpu_memory_utilization": settings.gpu_memory_utilization,
        "seed": seed,
        "enforce_eager": settings.enforce_eager,
        "enable_prefix_caching": settings.enable_prefix_caching,
        "logprobs_mode": LOGPROBS_MODE,
    }
    if settings.max_model_len is not None:
        options["max_model_len"] = settings.max_model_len
    if settings.max_num_batched_tokens is not None:
        options["max_num_batched_tokens"] = settings.max_num_batched_tokens
    if lora_rank is not None:  # one adapter at a time: the current version's
        options |= {"enable_lora": True, "max_lora_rank": lora_rank_slot(lora_rank), "max_loras": 1}
    return options


def start_engine(policy: Any, settings: VllmConfig, scratch: Path, seed: int, policy_version: int = 0) -> Any:
    """A ``vllm.LLM`` holding ``policy``'s current weights (for LoRA: its base, adapters come per version)."""
    vllm = import_vllm()
    model, revision = engine_model(policy, scratch, policy_version)
    options = engine_options(settings, seed, policy.lora_rank if policy.adapter == "lora" else None)
    if revision is not None:
        options["revision"] = revision
    return vllm.LLM(model=model, **options)
