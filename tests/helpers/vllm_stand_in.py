"""A stand-in for exactly the part of vLLM the vLLM backend uses, for tests on machines without vLLM or a GPU.

    install(monkeypatch)  # sys.modules["vllm"], ["vllm.lora"], ["vllm.lora.request"] are now this module's fakes

The shapes are vLLM 0.33's, read from its source: ``LLM(model, **engine_args)`` (unknown engine arguments
raise, as ``EngineArgs`` would), ``LLM.generate(prompts, sampling_params, *, use_tqdm, lora_request)`` →
``RequestOutput.outputs`` → ``CompletionOutput(index, token_ids, logprobs, finish_reason, ...)`` with
``logprobs`` one ``{token id: Logprob}`` dict per position, ``LLM.collective_rpc(method, timeout, args,
kwargs)`` → ``[result]`` on the one worker (a method name it lacks raises ``NotImplementedError``; the worker
has ``reload_weights(weights_iterator, weights_path, is_checkpoint_format)`` and ``apply_model``),
``LLM.apply_model(fn)`` → ``[fn(model)]``, ``LLM.reset_prefix_cache()``, ``LLM.llm_engine.add_lora /
remove_lora / list_loras``, ``SamplingParams`` (a keyword it does not know raises) and
``vllm.lora.request.LoRARequest``. If the backend drifts from this surface, a test fails here before it
would on a GPU. The same backend also runs against the real vLLM where there is one (``helpers/real_vllm.py``).

Behaviour that matters for the backend, mirrored too: the engine samples from a real model loaded from the
folder it was given (transformers, CPU, float32 whatever ``dtype`` says, so comparisons are exact), one
forward per token; ``logprobs_mode`` decides what comes back (``raw_logprobs``, the default: log_softmax of
the bare logits; ``processed_logprobs``: after temperature, top-k, top-p); sample j of a request with seed s
draws from seed s + j; it stops at ``stop_token_ids`` and at the end-of-sequence ids of the folder's
generation config (vLLM's ``update_from_generation_config``), keeping the stop token; a LoRA is cached by its
integer id, so a reused id serves the adapter first loaded under it; ``collective_rpc`` and ``apply_model``
only work in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), since a closure over GPU tensors cannot cross
to an engine process. A vLLM older than the worker's ``reload_weights`` is this module with that method
deleted (``monkeypatch.delattr(vllm_stand_in._Worker, "reload_weights")``).
"""

import copy
import functools
import json
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

__version__ = "0.33.0"

# The EngineArgs fields the backend may pass (a subset of vLLM 0.33's), with what the fake checks.
ENGINE_ARGS = {
    "skip_tokenizer_init", "dtype", "gpu_memory_utilization", "seed", "enforce_eager", "max_model_len",
    "enable_prefix_caching", "logprobs_mode", "enable_lora", "max_lora_rank", "max_loras", "max_cpu_loras",
    "revision", "max_num_batched_tokens",
}
LOGPROBS_MODES = ("raw_logprobs", "raw_logits", "processed_logprobs", "processed_logits")
MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    lora_request: Any = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    prompt_logprobs: Any
    outputs: list[CompletionOutput]
    finished: bool


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    detokenize: bool = True
    skip_special_tokens: bool = True

    def __post_init__(self) -> None:  # vLLM's _verify_args, for the fields used here
        if self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}.")
        if self.temperature < 0:
            raise ValueError(f"temperature must be non-negative, got {self.temperature}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.top_k < -1:
            raise ValueError(f"top_k must be 0 (disable), or at least 1, got {self.top_k}.")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}.")
        if self.logprobs is not None and self.logprobs < -1:
            raise ValueError(f"logprobs must be non-negative or -1, got {self.logprobs}.")
        if self.top_k == -1:
            self.top_k = 0


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str = ""
    base_model_name: str | None = None
    load_inplace: bool = False

    def __post_init__(self) -> None:
        if self.lora_int_id < 1:
            raise ValueError(f"id must be > 0, got {self.lora_int_id}")
        assert self.lora_path, "lora_path cannot be empty"


class _EngineModel(torch.nn.Module):
    """What ``apply_model`` hands the function: the engine's model, with vLLM's ``load_weights``."""

    def __init__(self, hf_model: torch.nn.Module, on_load):
        super().__init__()
        self.hf_model, self._on_load = hf_model, on_load

    def load_weights(self, weights) -> set[str]:
        params = dict(self.hf_model.named_parameters())
        loaded = set()
        for name, tensor in weights:
            if name not in params:
                raise ValueError(f"There is no module or parameter named '{name}' in {type(self.hf_model).__name__}")
            params[name].data.copy_(tensor)  # the weight loaders' copy: any device and dtype in, the engine's out
            loaded.add(name)
        self._on_load()
        return loaded


class _Worker:
    """What ``collective_rpc`` calls into: vLLM's worker (its wrapper hands every attribute on to it)."""

    def __init__(self, llm: "LLM"):
        self._llm = llm

    def get_model(self) -> _EngineModel:
        return _EngineModel(self._llm.base, self._llm._loaded)

    def apply_model(self, fn):
        return fn(self.get_model())

    def reload_weights(self, weights_iterator=None, weights_path: str | None = None,
                       is_checkpoint_format: bool = True) -> None:
        """vLLM's in-place reload: the model's checkpoint loader, then its weight processing again."""
        if weights_iterator is None or not is_checkpoint_format:
            raise NotImplementedError("the stand-in reloads only checkpoint-format weights handed to it")
        self._llm.events.append(("reload_weights",))
        self.get_model().load_weights(weights_iterator)


class _Engine:
    """``LLM.llm_engine``: the LoRA registry (an LRU of ``max_cpu_loras`` adapters, by integer id)."""

    def __init__(self, llm: "LLM"):
        self._llm = llm
        self.loras: dict[int, torch.nn.Module] = {}

    def add_lora(self, request: LoRARequest) -> bool:
        if not self._llm.options.get("enable_lora"):
            raise ValueError("LoRA is not enabled. Use --enable-lora to enable LoRA.")
        if request.lora_int_id in self.loras and not request.load_inplace:
            return True  # already cached under this id: the old adapter is what it serves
        capacity = self._llm.options.get("max_cpu_loras") or self._llm.options.get("max_loras", 1)
        while len(self.loras) >= capacity:
            self.loras.pop(next(iter(self.loras)))
        self.loras[request.lora_int_id] = self._llm._load_adapter(request.lora_path)
        self._llm.events.append(("add_lora", request.lora_int_id))
        return True

    def remove_lora(self, lora_id: int) -> bool:
        self._llm.events.append(("remove_lora", lora_id))
        return self.loras.pop(lora_id, None) is not None

    def list_loras(self) -> set[int]:
        return set(self.loras)


class LLM:
    instances: ClassVar[list["LLM"]] = []  # every engine built, for tests to inspect

    def __init__(self, model: str, **options: Any):
        unknown = set(options) - ENGINE_ARGS
        if unknown:
            raise TypeError(f"EngineArgs.__init__() got unexpected keyword arguments {sorted(unknown)}")
        if options.get("logprobs_mode", "raw_logprobs") not in LOGPROBS_MODES:
            raise ValueError(f"logprobs_mode must be one of {LOGPROBS_MODES}")
        if options.get("enable_lora") and options.get("max_lora_rank", 16) not in MAX_LORA_RANKS:
            raise ValueError(f"max_lora_rank must be one of {MAX_LORA_RANKS}")
        if not 0 < options.get("gpu_memory_utilization", 0.92) <= 1:
            raise ValueError("gpu_memory_utilization must be in (0, 1]")
        from transformers import AutoModelForCausalLM

        self.model_name, self.options = model, options
        self.in_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "0"
        self.base = AutoModelForCausalLM.from_pretrained(model, revision=options.get("revision"),
                                                         dtype=torch.float32).eval()
        generation_config = Path(model) / "generation_config.json"
        eos = json.loads(generation_config.read_text()).get("eos_token_id") if generation_config.is_file() else None
        self.config_eos = set() if eos is None else {eos} if isinstance(eos, int) else set(eos)
        self.weights_version = 0  # bumped by every load_weights: which weights each generate call used
        self.events: list[tuple] = []  # ("generate", weights_version, lora id), ("load_weights",), ("reset",), ...
        self.llm_engine = _Engine(self)
        LLM.instances.append(self)

    # --- the surface ---------------------------------------------------------------------------------------

    def generate(self, prompts, sampling_params=None, *, use_tqdm=True, lora_request=None, priority=None,
                 tokenization_kwargs=None, mm_processor_kwargs=None) -> list[RequestOutput]:
        prompts = prompts if isinstance(prompts, list) else [prompts]
        params = (list(sampling_params) if isinstance(sampling_params, list)
                  else [sampling_params or SamplingParams()] * len(prompts))
        if len(params) != len(prompts):
            raise ValueError("The lengths of prompts and sampling_params must be the same.")
        model = self._model_for(lora_request)
        lora_id = None if lora_request is None else lora_request.lora_int_id
        self.events.append(("generate", self.weights_version, lora_id))
        pairs = enumerate(zip(prompts, params, strict=True))
        return [self._request(str(i), prompt, p, model) for i, (prompt, p) in pairs]

    def collective_rpc(self, method, timeout: float | None = None, args: tuple = (),
                       kwargs: dict[str, Any] | None = None) -> list[Any]:
        if not self.in_process:  # local tensors and closures would have to be pickled to an engine process
            raise RuntimeError("collective_rpc over local tensors needs VLLM_ENABLE_V1_MULTIPROCESSING=0")
        worker = _Worker(self)
        if isinstance(method, str):
            func = getattr(worker, method, None)
            if func is None:
                raise NotImplementedError(f"Method {method!r} is not implemented.")
        else:
            func = functools.partial(method, worker)
        return [func(*args, **(kwargs or {}))]

    def apply_model(self, func) -> list[Any]:
        return self.collective_rpc("apply_model", args=(func,))

    def reset_prefix_cache(self, reset_running_requests: bool = False, reset_connector: bool = False) -> bool:
        self.events.append(("reset_prefix_cache",))
        return True

    # --- behind it ---------------------------------------------------------------------------------------

    def _loaded(self) -> None:
        self.weights_version += 1
        self.events.append(("load_weights", self.weights_version))

    def _load_adapter(self, path: str) -> torch.nn.Module:
        from peft import PeftModel

        rank = json.loads((Path(path) / "adapter_config.json").read_text())["r"]
        if rank > self.options.get("max_lora_rank", 16):
            raise ValueError(f"LoRA rank {rank} is greater than max_lora_rank {self.options.get('max_lora_rank')}")
        return PeftModel.from_pretrained(copy.deepcopy(self.base), path).eval()

    def _model_for(self, lora_request: LoRARequest | None) -> torch.nn.Module:
        if lora_request is None:
            return self.base
        if lora_request.lora_int_id not in self.llm_engine.loras:
            self.llm_engine.add_lora(lora_request)  # vLLM loads an unseen adapter on first use
        return self.llm_engine.loras[lora_request.lora_int_id]

    def _request(self, request_id: str, prompt: dict, params: SamplingParams, model) -> RequestOutput:
        prompt_ids = list(prompt["prompt_token_ids"])
        stop = set(params.stop_token_ids or ()) | (set() if params.ignore_eos else self.config_eos)
        outputs = []
        for j in range(params.n):
            generator = torch.Generator()
            if params.seed is None:
                generator.seed()
            else:
                generator.manual_seed(params.seed + j)
            outputs.append(self._sample(j, prompt_ids, params, stop, model, generator))
        return RequestOutput(request_id, None, prompt_ids, None, outputs, True)

    def _sample(self, index, prompt_ids, params, stop, model, generator) -> CompletionOutput:
        mode = self.options.get("logprobs_mode", "raw_logprobs")
        ids, logprobs, reason = list(prompt_ids), [], "length"
        for _ in range(params.max_tokens):
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()  # (V,)
            processed = _top_k_top_p(logits / params.temperature, params.top_k, params.top_p)
            token = int(torch.multinomial(processed.softmax(-1), 1, generator=generator))
            reported = {"raw_logprobs": logits.log_softmax(-1), "raw_logits": logits,
                        "processed_logprobs": processed.log_softmax(-1), "processed_logits": processed}[mode]
            logprobs.append({token: Logprob(float(reported[token]), rank=1)} if params.logprobs is not None else None)
            ids.append(token)
            if token in stop:
                reason = "stop"
                break
        completion = ids[len(prompt_ids):]
        return CompletionOutput(index, "", completion, None,
                                logprobs if params.logprobs is not None else None, reason,
                                completion[-1] if reason == "stop" else None)


def _top_k_top_p(logits: torch.Tensor, k: int, p: float) -> torch.Tensor:
    """vLLM's apply_top_k_top_p on one row: sort ascending, mask below the k-th largest, then mask the
    low tail whose cumulative probability is ≤ 1 - p, always keeping the largest."""
    ordered, order = logits.sort(descending=False)
    if 0 < k < logits.numel():
        kth = ordered[-k]
        ordered = ordered.masked_fill(ordered < kth, float("-inf"))
    if p < 1.0:
        cumulative = ordered.softmax(-1).cumsum(-1)
        drop = cumulative <= 1 - p
        drop[-1] = False
        ordered = ordered.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(0, order, ordered)


def install(monkeypatch) -> types.ModuleType:
    """Put this stand-in in ``sys.modules`` as ``vllm`` (and ``vllm.lora.request``) for one test."""
    this = sys.modules[__name__]
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    lora.request = request
    monkeypatch.setitem(sys.modules, "vllm", this)
    monkeypatch.setitem(sys.modules, "vllm.lora", lora)
    monkeypatch.setitem(sys.modules, "vllm.lora.request", request)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")  # vLLM's default: the backend must change it
    monkeypatch.setattr(LLM, "instances", [])
    return this
