"""export_policy / load_export: Hugging Face folders that load back to the same logits, written atomically."""

import json

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer

from ftis.node.models import (
    ModelLoadError,
    build_tiny_model,
    build_tokenizer,
    export_policy,
    load_export,
    load_policy,
    loading,
    tokenizer_fingerprint,
)
from ftis.node.models.export import POLICY_FILE, read_export_record

INPUT_IDS = torch.tensor([[4, 9, 21, 10, 25, 11, 5, 6], [6, 12, 13, 7, 2, 0, 0, 0]])  # (B=2, T=8)


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=INPUT_IDS).logits


def _train_a_step(policy) -> None:
    """One AdamW step, so that an export has something to get right (a fresh adapter is a no-op)."""
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-2)
    logits = policy.model(input_ids=INPUT_IDS).logits  # (B, T, V)
    torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), INPUT_IDS[:, 1:].flatten()).backward()
    optimizer.step()


def test_full_round_trip(tmp_path):
    policy = load_policy("tiny-medium", seed=2)
    _train_a_step(policy)
    folder = export_policy(policy, tmp_path / "export", policy_version=7)
    assert (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file()
    loaded = load_export(folder)
    assert torch.equal(_logits(loaded.model), _logits(policy.model))
    assert (loaded.name, loaded.adapter, loaded.fingerprint) == ("tiny-medium", "full", policy.fingerprint)
    assert read_export_record(folder)["policy_version"] == 7
    # transformers alone reads it, tokenizer included (a Llama folder keeps its tokenizer.json as it is).
    assert torch.equal(_logits(AutoModelForCausalLM.from_pretrained(folder)), _logits(policy.model))
    assert tokenizer_fingerprint(AutoTokenizer.from_pretrained(folder)) == policy.fingerprint


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")  # peft 0.21 on transformers 5
def test_lora_round_trip(tmp_path):
    policy = load_policy("tiny-small", adapter="lora", lora_rank=4, lora_alpha=8, seed=3)
    _train_a_step(policy)
    _train_a_step(policy)  # the first step only moves B (A's gradient is zero while B is)
    folder = export_policy(policy, tmp_path / "export")
    assert (folder / "adapter_config.json").is_file() and (folder / "base" / "config.json").is_file()
    assert not (folder / "config.json").exists()  # the adapter only, beside its base
    loaded = load_export(folder)
    assert torch.equal(_logits(loaded.model), _logits(policy.model))
    assert (loaded.adapter, loaded.lora_rank, loaded.lora_alpha) == ("lora", 4, 8)
    trainable = {name for name, parameter in loaded.model.named_parameters() if parameter.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    # base + adapter with plain transformers and peft, as a user or vLLM would load them.
    plain = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(folder / "base"), folder)
    assert torch.allclose(_logits(plain), _logits(policy.model), atol=1e-6)
    # the base in base/ is the untrained tiny model, not the adapted one
    assert torch.equal(_logits(AutoModelForCausalLM.from_pretrained(folder / "base")),
                       _logits(build_tiny_model("tiny-small", seed=3)))


def test_a_lora_export_loads_merged_for_full_training(tmp_path):
    policy = load_policy("tiny-small", adapter="lora", lora_rank=4, seed=1)
    _train_a_step(policy)
    folder = export_policy(policy, tmp_path / "export")
    merged = load_policy(str(folder), adapter="full")
    assert merged.trainable_parameters() == list(merged.model.parameters())
    assert not any("lora_" in name for name, _ in merged.model.named_parameters())
    assert torch.allclose(_logits(merged.model), _logits(policy.model), atol=1e-5)


def test_a_lora_on_a_hub_model_names_its_base_instead_of_copying_it(tmp_path, monkeypatch):
    calls = []

    def fake_model(name, **kwargs):
        calls.append((name, kwargs["revision"]))
        model = build_tiny_model("tiny-small", seed=0)
        model.config._name_or_path = model.name_or_path = name
        return model

    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", fake_model)
    monkeypatch.setattr(loading.AutoTokenizer, "from_pretrained", lambda name, **kwargs: build_tokenizer())
    policy = load_policy("Qwen/Qwen2.5-3B-Instruct", adapter="lora", lora_rank=4, revision="abc123")
    _train_a_step(policy)
    folder = export_policy(policy, tmp_path / "export")
    assert not (folder / "base").exists()
    assert json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"] == policy.name
    loaded = load_export(folder)  # fetches the base from the (fake) hub again
    assert calls == [("Qwen/Qwen2.5-3B-Instruct", "abc123")] * 2  # the same revision of the base
    assert (loaded.base_model_id, loaded.revision) == ("Qwen/Qwen2.5-3B-Instruct", "abc123")
    assert torch.equal(_logits(loaded.model), _logits(policy.model))


def test_export_replaces_an_earlier_one_and_leaves_nothing_behind(tmp_path):
    first, second = load_policy("tiny-small", seed=1), load_policy("tiny-small", seed=2)
    export_policy(first, tmp_path / "export", policy_version=1)
    export_policy(second, tmp_path / "export", policy_version=2)
    assert [path.name for path in tmp_path.iterdir()] == ["export"]  # no staging or old folder left
    assert read_export_record(tmp_path / "export")["policy_version"] == 2
    assert torch.equal(_logits(load_export(tmp_path / "export").model), _logits(second.model))


def test_a_failed_export_keeps_the_previous_one(tmp_path, monkeypatch):
    policy = load_policy("tiny-small", seed=1)
    export_policy(policy, tmp_path / "export", policy_version=1)

    def disk_full(*args, **kwargs):
        raise OSError("no space left on device")

    monkeypatch.setattr(policy.tokenizer, "save_pretrained", disk_full)  # fails after the weights are written
    with pytest.raises(OSError, match="no space"):
        export_policy(policy, tmp_path / "export", policy_version=2)
    assert [path.name for path in tmp_path.iterdir()] == ["export"]
    assert read_export_record(tmp_path / "export")["policy_version"] == 1


def test_export_refuses_to_replace_a_folder_that_is_not_an_export(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "important.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match=POLICY_FILE):
        export_policy(load_policy("tiny-small"), tmp_path / "data")
    assert (tmp_path / "data" / "important.txt").read_text() == "keep me"


def test_load_export_errors(tmp_path):
    policy = load_policy("tiny-small")
    policy.model.save_pretrained(tmp_path / "plain")
    with pytest.raises(ModelLoadError, match=POLICY_FILE):
        load_export(tmp_path / "plain")  # a model folder, but not an export: load_policy reads it
    folder = export_policy(policy, tmp_path / "export")
    record = read_export_record(folder)
    (folder / POLICY_FILE).write_text(json.dumps({**record, "fingerprint": "sha256:" + "0" * 64}))
    with pytest.raises(ModelLoadError, match="fingerprint"):
        load_export(folder)
