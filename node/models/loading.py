"""Load the node's policy: a tiny built-in model, a GGUF file, a local folder, or a Hugging Face hub model; full
or LoRA.

    from ftis.node.models.loading import load_policy
    policy = load_policy("tiny-small", adapter="lora", seed=0)
    policy = load_policy("Qwen/Qwen2.5-3B-Instruct", adapter="lora", dtype="bfloat16", device="cuda")
    policy = load_policy("models/SmolLM2-135M-Instruct.Q4_1.gguf")  # converted once, then from the cache
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-4)

Which source ``model`` names, in this order:
1. a name in ``TINY_MODELS`` (``tiny-small``, ``tiny-medium``, ``tiny-large``, ``tiny-small-bpe``): built in
   code from ``seed``, with its built-in tokenizer;
2. a name in ``REAL_MODELS`` (``smollm2-135m-instruct``, ``gemma-3-270m``): the folder ``ftis-node models fetch`` wrote
   in the cache (``fetch.py``; without it, an error naming the command), loaded as a folder (step 4);
3. a file whose name ends in ``.gguf`` (llama.cpp's format, quantized or not): converted the first time into a
   Hugging Face folder in the cache named by the file's sha256 (``$FTIS_CACHE/models/gguf-<prefix>/``, a line
   on stderr says so; ``gguf.py``), then loaded as that folder (step 4). A ``.gguf`` name that is no file, or
   a file that is not a readable GGUF, raises; nothing is left in the cache;
4. an existing folder: a full model (``config.json``, as ``save_pretrained`` writes) or a LoRA adapter
   (``adapter_config.json``, as ``export.py`` writes). An adapter's base is the ``base/`` folder beside
   it when there is one, otherwise the model its ``base_model_name_or_path`` names. A folder converted from
   a GGUF file (its manifest ``ftis-model.json``) must hold every licence file the manifest names: checked
   before anything else is read;
5. anything else that looks like a path (starts with ``/``, ``.`` or ``~``, or has two or more ``/``) is
   a missing folder, and another ``tiny-*`` name an unknown tiny model: both raise;
6. otherwise a hub id (``Qwen/Qwen2.5-1.5B-Instruct``), loaded with ``from_pretrained``.

LoRA (``adapter="lora"``) goes through peft, with dropout 0 (the importance ratios need log-probs that
are a pure function of the weights): only the adapter's parameters are trainable. Rank rule: a rank
above half the smaller side of the smallest adapted matrix is not low-rank any more (the tiny models'
key/value projections are 32–64 wide), so the rank is clamped to that, alpha is scaled to keep
alpha/rank (LoRA's update scale), and a ``LoraRankClamped`` warning says so. Qwen2.5-1.5B and -3B at the
paper's r=128 are not clamped. A LoRA folder keeps its own rank, alpha and target modules; loading one
with ``adapter="full"`` merges the adapter into the base and trains the merged model in full.

Every policy has a pad token (its eos when the tokenizer has none), so prompts can be batched.
The model is returned in eval mode.
"""

import json
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import torch
import transformers
from packaging.version import Version
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from ftis.node.models.catalog import REAL_MODELS
from ftis.node.models.errors import ModelLoadError, NotAModelError, UnknownModelError
from ftis.node.models.gguf import check_licence_files, gguf_folder, read_manifest
from ftis.node.models.quiet import no_progress_bars
from ftis.node.models.real import real_model_folder
from ftis.node.models.seeding import seeded
from ftis.node.models.tiny import TINY_MODELS, build_tiny_model, build_tiny_tokenizer
from ftis.node.models.tokenizer import tokenizer_fingerprint

Adapter = Literal["full", "lora"]
Dtype = Literal["float32", "bfloat16", "float16", "auto"] | torch.dtype

DEFAULT_LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LORA_BASE_FOLDER = "base"  # beside adapter_config.json: the adapter's base model, when not a hub model
GGUF_SUFFIX = ".gguf"  # a model file in llama.cpp's format, converted to a folder first (gguf.py)
_PATH_LIKE = re.compile(r"^(/|\.|~)|/.*/|\\")


class LoraRankClamped(UserWarning):
    """The LoRA rank asked for was too large for the model and was lowered (see the module docstring)."""


@dataclass
class Policy:
    """The model a node generates with and trains, and what peers need to know about it."""

    model: torch.nn.Module  # a PreTrainedModel (full) or a peft PeftModel wrapping one (lora)
    tokenizer: PreTrainedTokenizerBase
    name: str  # what was loaded: a tiny name, a .gguf file, a folder or a hub id
    adapter: Adapter
    fingerprint: str  # tokenizer_fingerprint(tokenizer): goes into every published batch
    lora_rank: int | None = None  # the rank in use (after clamping); None for full fine-tuning
    lora_alpha: float | None = None
    base_model_id: str | None = None  # LoRA on a hub model: its id, which exports name instead of copying it
    revision: str | None = None  # hub revision the weights came from, if one was asked for
    licence: str | None = None  # the licence of weights that must travel with theirs (a converted folder's)
    licence_files: tuple[Path, ...] = ()  # ...its files, which every export of this policy carries (gguf.py)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """The parameters the optimizer updates: all of them (full) or the adapter's (LoRA)."""
        return [parameter for parameter in self.model.parameters() if parameter.requires_grad]


@dataclass
class _Loaded:
    model: Any  # PreTrainedModel, or PeftModel for a LoRA folder
    tokenizer: PreTrainedTokenizerBase
    hub_id: str | None  # the hub id of the (base) weights, when they came from the hub
    lora: bool = False  # model is already a PeftModel (a LoRA folder)
    licence: str | None = None  # a converted folder's licence (its manifest), or its base's
    licence_files: tuple[Path, ...] = ()


def load_policy(
    model: str,
    *,
    adapter: Adapter = "full",
    lora_rank: int = 128,
    lora_alpha: float = 256,
    lora_target_modules: list[str] | None = None,
    dtype: Dtype = "float32",
    device: str | torch.device = "cpu",
    seed: int = 0,
    revision: str | None = None,
) -> Policy:
    """Load ``model`` (tiny name, ``.gguf`` file, folder or hub id) as a trainable policy; see the module
    docstring."""
    if adapter not in ("full", "lora"):
        raise ValueError(f"adapter must be 'full' or 'lora', not {adapter!r}")
    loaded = _load(model, dtype=dtype, seed=seed, revision=revision, trainable_adapter=adapter == "lora")
    _ensure_pad_token(loaded.tokenizer, loaded.model)
    network = loaded.model
    if loaded.lora and adapter == "full":
        network = network.merge_and_unload()
    network = network.to(device)
    rank = alpha = None
    if adapter == "full":
        network.requires_grad_(True)
    elif loaded.lora:
        config = network.peft_config["default"]
        rank, alpha = config.r, config.lora_alpha
    else:
        targets = lora_target_modules or _present_targets(network, model)
        rank, alpha = _clamped_rank(network, targets, lora_rank, lora_alpha, model)
        network = _add_lora(network, targets, rank, alpha, seed=seed, revision=revision if loaded.hub_id else None)
    return Policy(
        model=network.eval(),
        tokenizer=loaded.tokenizer,
        name=model,
        adapter=adapter,
        fingerprint=tokenizer_fingerprint(loaded.tokenizer),
        lora_rank=rank,
        lora_alpha=alpha,
        base_model_id=loaded.hub_id if adapter == "lora" else None,
        revision=revision,
        licence=loaded.licence,
        licence_files=loaded.licence_files,
    )


def _load(model: str, *, dtype: Dtype, seed: int, revision: str | None, trainable_adapter: bool) -> _Loaded:
    """Model and tokenizer from whichever source ``model`` names (module docstring, steps 1–6)."""
    if model in TINY_MODELS:
        tiny_dtype = torch.float32 if dtype == "auto" else _torch_dtype(dtype)
        network = build_tiny_model(model, seed=seed).to(tiny_dtype)
        return _Loaded(network, build_tiny_tokenizer(model), hub_id=None)
    path = Path(model).expanduser()
    if model in REAL_MODELS and not path.exists():
        try:
            path = real_model_folder(model)
        except FileNotFoundError as missing:
            raise NotAModelError(str(missing)) from None
    if path.suffix.lower() == GGUF_SUFFIX and not path.is_dir():
        if not path.is_file():
            raise NotAModelError(f"no such GGUF file: {model}")
        path = gguf_folder(path)
    licence, licence_files = None, ()
    if path.is_dir():
        check_licence_files(path)
        manifest = read_manifest(path) or {}
        licence = manifest.get("licence")
        licence_files = tuple(path.absolute() / name for name in manifest.get("licence_files", []))
    if path.exists():
        if (path / "adapter_config.json").is_file():
            loaded = _load_lora_folder(path, dtype=dtype, seed=seed, trainable=trainable_adapter)
            return replace(loaded, licence=licence or loaded.licence, licence_files=licence_files or
                           loaded.licence_files) if licence_files else loaded
        if (path / "config.json").is_file():
            with no_progress_bars():  # a local folder loads at once
                return _Loaded(_from_pretrained(str(path), dtype, None), AutoTokenizer.from_pretrained(str(path)),
                               None, licence=licence, licence_files=licence_files)
        raise NotAModelError(f"{model} is not a model folder: it has neither config.json nor adapter_config.json")
    if model.startswith("tiny-"):
        raise UnknownModelError(f"unknown tiny model {model!r}; the built-in ones are {', '.join(TINY_MODELS)}")
    if _PATH_LIKE.search(model):
        raise NotAModelError(f"no such model folder: {model}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(model, revision=revision)
        return _Loaded(_from_pretrained(model, dtype, revision), tokenizer, hub_id=model)
    except OSError as error:  # what transformers raises for an unknown repo, no network and no cache, ...
        raise ModelLoadError(f"{model} is not a local folder, and loading it from the hub failed: {error}") from error


def _load_lora_folder(path: Path, *, dtype: Dtype, seed: int, trainable: bool) -> _Loaded:
    """A peft adapter folder on its base: ``base/`` beside it, else the base its config names."""
    from peft import PeftModel

    adapter_config = json.loads((path / "adapter_config.json").read_text())
    base_name, base_revision = adapter_config.get("base_model_name_or_path"), adapter_config.get("revision")
    if (path / LORA_BASE_FOLDER).is_dir():
        base_name = str(path / LORA_BASE_FOLDER)
    if not base_name:
        raise NotAModelError(f"{path} holds a LoRA adapter without a base model (no base/, no base_model_name_or_path)")
    base = _load(base_name, dtype=dtype, seed=seed, revision=base_revision, trainable_adapter=False)
    has_tokenizer = (path / "tokenizer_config.json").is_file()
    tokenizer = AutoTokenizer.from_pretrained(str(path)) if has_tokenizer else base.tokenizer
    with _quiet_peft():
        peft_model = PeftModel.from_pretrained(base.model, str(path), is_trainable=trainable)
    return _Loaded(peft_model, tokenizer, hub_id=base.hub_id, lora=True, licence=base.licence,
                   licence_files=base.licence_files)


def _from_pretrained(name: str, dtype: Dtype, revision: str | None) -> PreTrainedModel:
    # transformers renamed torch_dtype to dtype in 4.56; pyproject allows >= 4.46.
    dtype_key = "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"
    value = dtype if dtype == "auto" else _torch_dtype(dtype)
    return AutoModelForCausalLM.from_pretrained(name, revision=revision, **{dtype_key: value})


def _torch_dtype(dtype: Dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"dtype must be float32, bfloat16, float16, auto or a torch.dtype, not {dtype!r}")
    return getattr(torch, dtype)


def _ensure_pad_token(tokenizer: PreTrainedTokenizerBase, model: Any) -> None:
    """Batching needs a pad token: use eos when the tokenizer has none (the pad positions are masked)."""
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelLoadError("the tokenizer has neither a pad nor an eos token, so prompts cannot be batched")
        tokenizer.pad_token = tokenizer.eos_token
    for config in (model.config, getattr(model, "generation_config", None)):
        if config is not None and getattr(config, "pad_token_id", None) is None:
            config.pad_token_id = tokenizer.pad_token_id


def _present_targets(model: torch.nn.Module, name: str) -> list[str]:
    """The default LoRA targets (attention and MLP projections) that ``model`` has."""
    present = {module_name.rsplit(".", 1)[-1] for module_name, _ in model.named_modules()}
    targets = [target for target in DEFAULT_LORA_TARGETS if target in present]
    if not targets:
        raise ModelLoadError(
            f"{name} has none of the default LoRA targets ({', '.join(DEFAULT_LORA_TARGETS)}): "
            "pass lora_target_modules"
        )
    return targets


def _clamped_rank(
    model: torch.nn.Module, targets: list[str], rank: int, alpha: float, name: str
) -> tuple[int, float]:
    """The rank rule of the module docstring: at most half the smallest side of any adapted matrix."""
    sides = [
        min(module.in_features, module.out_features)
        for module_name, module in model.named_modules()
        if module_name.rsplit(".", 1)[-1] in targets and isinstance(module, torch.nn.Linear)
    ]
    if not sides:
        raise ModelLoadError(f"none of the LoRA target modules {targets} is a linear layer of {name}")
    if rank < 1:
        raise ValueError(f"lora_rank must be at least 1, not {rank}")
    limit = max(1, min(sides) // 2)
    if rank <= limit:
        return rank, alpha
    clamped_alpha = alpha * limit / rank
    warnings.warn(
        f"LoRA rank {rank} is more than half the smallest adapted matrix side ({min(sides)}) of {name}: "
        f"using rank {limit} and alpha {clamped_alpha:g} (alpha/rank stays {alpha / rank:g})",
        LoraRankClamped,
        stacklevel=3,
    )
    return limit, clamped_alpha


@contextmanager
def _quiet_peft() -> Iterator[None]:
    """peft 0.21 calls a transformers 5 method that warns it is deprecated: not the user's business."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def _add_lora(
    model: PreTrainedModel, targets: list[str], rank: int, alpha: float, *, seed: int, revision: str | None
) -> torch.nn.Module:
    """Wrap ``model`` in a fresh peft LoRA adapter (B = 0, so it starts as the base model)."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=rank, lora_alpha=alpha, target_modules=list(targets), lora_dropout=0.0, bias="none",
        task_type="CAUSAL_LM", revision=revision,
    )
    devices = [model.device] if model.device.type == "cuda" else []
    with seeded(seed, devices), _quiet_peft():  # A's random init: the same seed gives the same adapter
        return get_peft_model(model, config)
