"""Export the current policy in Hugging Face format, atomically, and load an export back.

    from ftis.node.models.export import export_policy, load_export
    export_policy(policy, "runs/a/export", policy_version=12)
    policy = load_export("runs/a/export")  # the same weights, tokenizer and fingerprint

What a folder holds (transformers and vLLM read it as it is):
- full:  ``save_pretrained`` of the model (config.json, model.safetensors, generation_config.json);
- LoRA:  ``save_pretrained`` of the peft adapter (adapter_config.json, adapter_model.safetensors); its
         base is named by id when it is a hub model (``base_model_name_or_path``), and otherwise copied
         into ``base/`` (a tiny or local base), so the export never depends on a folder that may move
         or be replaced. With vLLM: ``LLM(model=<base>, enable_lora=True)`` + a ``LoRARequest`` for the folder;
- both:  the tokenizer, and ``ftis_policy.json`` (name, adapter, fingerprint, policy version); and where the
         weights started from a folder whose licence travels with them (Gemma's terms and notice:
         ``Policy.licence_files``), those files and a manifest naming them (``ftis-model.json``), beside the
         weights and beside ``base/``, which loading checks as it checks the folder they came from.

Atomic: everything is written into a temporary sibling folder, which is then renamed over the target
(the old one is first renamed aside, then deleted). A reader sees the old export or the new one, never
a half-written one; between the two renames the folder is briefly absent.
"""

import json
import shutil
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from ftis.node.atomic import replace_folder
from ftis.node.models.errors import ModelLoadError
from ftis.node.models.gguf import MANIFEST, MANIFEST_FORMAT
from ftis.node.models.loading import LORA_BASE_FOLDER, Dtype, Policy, load_policy
from ftis.node.models.quiet import no_progress_bars

POLICY_FILE = "ftis_policy.json"
EXPORT_FORMAT = 1


def export_policy(policy: Policy, folder: str | Path, *, policy_version: int | None = None) -> Path:
    """Write ``policy`` into ``folder`` in Hugging Face format, replacing an earlier export there."""
    folder = Path(folder).expanduser().absolute()
    if folder.exists() and not (folder / POLICY_FILE).is_file():
        raise FileExistsError(f"{folder} exists and is not an earlier export ({POLICY_FILE} missing): not replacing it")
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = folder.with_name(f".{folder.name}.tmp-{uuid.uuid4().hex[:8]}")
    staging.mkdir()  # not mkdtemp: its mode 0700 would keep other users (a vLLM server) out
    try:
        _write(policy, staging, policy_version)
        replace_folder(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder


def load_export(
    folder: str | Path, *, dtype: Dtype = "float32", device: str | torch.device = "cpu", seed: int = 0
) -> Policy:
    """Load an export written by ``export_policy``: a full model, or a LoRA adapter on its base.

    The policy keeps the exported name; a tokenizer whose fingerprint differs from the recorded one
    raises ``ModelLoadError`` (its ids would not mean what the exported model learned).
    """
    folder = Path(folder).expanduser()
    record = read_export_record(folder)
    policy = load_policy(str(folder), adapter=record["adapter"], dtype=dtype, device=device, seed=seed)
    if policy.fingerprint != record["fingerprint"]:
        raise ModelLoadError(
            f"the tokenizer in {folder} has fingerprint {policy.fingerprint}, "
            f"the export recorded {record['fingerprint']}"
        )
    return replace(policy, name=record["name"], revision=record.get("revision"))


def read_export_record(folder: str | Path) -> dict[str, Any]:
    """The ``ftis_policy.json`` of an export (name, adapter, fingerprint, policy version, ...)."""
    path = Path(folder).expanduser() / POLICY_FILE
    if not path.is_file():
        raise ModelLoadError(f"{folder} is not an export of this node ({POLICY_FILE} missing); use load_policy")
    return json.loads(path.read_text())


def _write(policy: Policy, staging: Path, policy_version: int | None) -> None:
    with no_progress_bars():  # a node exports often; transformers' "Writing model shards" bar is noise
        _write_weights(policy, staging)
    policy.tokenizer.save_pretrained(staging)
    _write_licence(policy, staging)
    if (staging / LORA_BASE_FOLDER).is_dir():
        _write_licence(policy, staging / LORA_BASE_FOLDER)
    _write_record(policy, staging, policy_version)


def _write_licence(policy: Policy, folder: Path) -> None:
    """The licence files the policy's weights must travel with (Gemma's terms and notice), and a manifest naming
    them, so that loading the export checks them as it checks the folder the weights came from."""
    if not policy.licence_files:
        return
    for source in policy.licence_files:
        shutil.copyfile(source, folder / source.name)
    manifest = {"format": MANIFEST_FORMAT, "licence": policy.licence,
                "licence_files": [source.name for source in policy.licence_files],
                "note": f"trained by ftis-node from {policy.name}: the licence of the weights it started from applies"}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def _write_weights(policy: Policy, staging: Path) -> None:
    if policy.adapter == "full":
        policy.model.save_pretrained(staging)
    else:
        # save_embedding_layers=False: "auto" looks the base up on the hub to see whether the vocabulary
        # changed; LoRA here never adapts the embeddings, and a node may be offline.
        policy.model.save_pretrained(staging, save_embedding_layers=False)
        if policy.base_model_id is None:
            _save_lora_base(policy.model, staging / LORA_BASE_FOLDER)
            policy.tokenizer.save_pretrained(staging / LORA_BASE_FOLDER)


def _write_record(policy: Policy, staging: Path, policy_version: int | None) -> None:
    record = {
        "format": EXPORT_FORMAT,
        "name": policy.name,
        "adapter": policy.adapter,
        "fingerprint": policy.fingerprint,
        "policy_version": policy_version,
        "lora_rank": policy.lora_rank,
        "lora_alpha": policy.lora_alpha,
        "base_model_id": policy.base_model_id,
        "revision": policy.revision,
    }
    (staging / POLICY_FILE).write_text(json.dumps(record, indent=2) + "\n")


def _save_lora_base(peft_model: Any, folder: Path) -> None:
    """The frozen base weights of a peft model, without the adapter, as a plain ``save_pretrained`` folder."""
    base = peft_model.get_base_model()  # the base model with LoRA layers injected into it
    state = {
        key.replace(".base_layer.", "."): tensor
        for key, tensor in base.state_dict().items()
        if ".lora_" not in key
    }
    base.save_pretrained(folder, state_dict=state)


