"""The real pretrained models (``models fetch``: SmolLM2-135M-Instruct, Gemma 3 270M) through ``load_policy``, their
licence files, and ``--model x.gguf``: converted once into the cache, reused, refused whole when unreadable."""

import hashlib
import json
import shutil

import pytest
import torch
from helpers.real_models import TINY_CHAT_TEMPLATE, real_model, write_tiny_gguf
from transformers import AutoTokenizer

from ftis.node.models import LicenceFileMissing, ModelLoadError, NotAModelError, load_policy
from ftis.node.models import gguf as gguf_module
from ftis.node.models.gguf import MANIFEST, SOURCE_NOTE, read_manifest
from ftis.node.models.real import real_model_folder

PROMPT = "The capital of France is"
GEMMA_NOTICE = "Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms"
EXPECTED = {  # what the models are, measured once from the files the catalog pins
    "smollm2-135m-instruct": {
        "architecture": "LlamaForCausalLM", "parameters": 134_515_008, "vocabulary": 49_152, "bos": 1, "eos": 2,
        "chat_template": True, "adds_bos": False, "licence": "apache-2.0", "licence_files": ["LICENSE"],
        "gguf_sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    },
    "gemma-3-270m": {
        "architecture": "Gemma3ForCausalLM", "parameters": 268_098_176, "vocabulary": 262_144, "bos": 2, "eos": 1,
        "chat_template": False, "adds_bos": True, "licence": "gemma", "licence_files": ["GEMMA_TERMS.html", "NOTICE"],
        "gguf_sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    },
}


def _last_logits(policy) -> torch.Tensor:  # (V,) after PROMPT
    ids = policy.tokenizer(PROMPT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        return policy.model(input_ids=ids).logits[0, -1]


@pytest.mark.parametrize("name", list(EXPECTED))
def test_a_real_model_loads_full_and_lora(name):
    folder, expected = real_model(name), EXPECTED[name]
    full = load_policy(str(folder))
    tokenizer = full.tokenizer
    assert type(full.model).__name__ == expected["architecture"]
    assert sum(parameter.numel() for parameter in full.model.parameters()) == expected["parameters"]
    assert len(tokenizer) == full.model.config.vocab_size == expected["vocabulary"]
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id) == (expected["bos"], expected["eos"])
    assert (tokenizer.chat_template is not None) == expected["chat_template"]
    assert (tokenizer("Hello")["input_ids"][0] == tokenizer.bos_token_id) == expected["adds_bos"]
    full_logits = _last_logits(full)
    # Real weights, not random ones: both know where Paris is.
    assert " Paris" in [tokenizer.decode([index]) for index in full_logits.topk(3).indices.tolist()]

    manifest = read_manifest(folder)
    assert manifest is not None
    assert manifest["licence"] == expected["licence"] and manifest["licence_files"] == expected["licence_files"]
    assert manifest["source"]["sha256"] == expected["gguf_sha256"]
    assert manifest["parameters"] == expected["parameters"] and manifest["logit_check"]["largest_difference"] == 0
    assert all((folder / file).is_file() for file in [*expected["licence_files"], SOURCE_NOTE])

    lora = load_policy(str(folder), adapter="lora", lora_rank=8, lora_alpha=16)
    trainable = {name for name, parameter in lora.model.named_parameters() if parameter.requires_grad}
    assert trainable and all(".lora_" in name for name in trainable) and lora.lora_rank == 8
    assert lora.fingerprint == full.fingerprint
    assert torch.equal(_last_logits(lora), full_logits)  # B = 0: the adapter starts as the model


def test_the_real_models_speak_as_they_should():
    """SmolLM2 is an instruct model in ChatML, with its system turn; Gemma 3 270M's folder carries the notice its
    terms require."""
    smollm2 = AutoTokenizer.from_pretrained(str(real_model("smollm2-135m-instruct")))
    chat = smollm2.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True)
    assert chat.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert chat.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    gemma = real_model("gemma-3-270m")
    assert GEMMA_NOTICE in (gemma / "NOTICE").read_text()
    assert "Gemma Terms of Use" in (gemma / "GEMMA_TERMS.html").read_text()


@pytest.mark.parametrize(("name", "removed"), [("smollm2-135m-instruct", "LICENSE"), ("gemma-3-270m", "NOTICE")])
def test_a_converted_folder_without_a_licence_file_is_refused(name, removed, tmp_path):
    source = real_model(name)
    copy = tmp_path / name
    copy.mkdir()
    for file in source.iterdir():  # the small files copied, the weights linked
        if file.suffix == ".safetensors":
            (copy / file.name).symlink_to(file)
        elif file.name != removed:
            shutil.copyfile(file, copy / file.name)
    with pytest.raises(LicenceFileMissing, match=f"licence file missing: {removed}"):
        load_policy(str(copy))
    with pytest.raises(LicenceFileMissing):  # the base of a LoRA adapter is checked as well
        load_policy(str(copy), adapter="lora", lora_rank=8)
    (copy / "model.safetensors").unlink()  # refused before anything else is read: the weights are not needed
    with pytest.raises(LicenceFileMissing):
        load_policy(str(copy))


def test_the_copy_with_linked_weights_loads_when_whole(tmp_path):
    source = real_model("smollm2-135m-instruct")
    copy = tmp_path / "smollm2"
    copy.mkdir()
    for file in source.iterdir():
        if file.suffix == ".safetensors":
            (copy / file.name).symlink_to(file)
        else:
            shutil.copyfile(file, copy / file.name)
    assert load_policy(str(copy)).model.config.vocab_size == EXPECTED["smollm2-135m-instruct"]["vocabulary"]


def test_a_gguf_file_is_converted_once_then_loaded_from_the_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FTIS_CACHE", str(tmp_path / "cache"))
    gguf = write_tiny_gguf(tmp_path / "tiny.gguf", licence="mit")
    digest = hashlib.sha256(gguf.read_bytes()).hexdigest()

    policy = load_policy(str(gguf))
    folder = tmp_path / "cache" / "models" / f"gguf-{digest[:16]}"
    assert "converting tiny.gguf to a Hugging Face folder (first time only" in capsys.readouterr().err
    assert sorted(path.name for path in folder.parent.iterdir()) == [folder.name]  # no staging folder left
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["source"] | {"origin": None} == {"file": "tiny.gguf", "bytes": gguf.stat().st_size,
                                                     "sha256": digest, "origin": None, "name": "tiny test model"}
    assert manifest["licence"] == "mit" and manifest["licence_files"] == []
    assert manifest["architecture"] == "LlamaForCausalLM" and manifest["logit_check"]["largest_difference"] == 0
    assert policy.name == str(gguf) and policy.tokenizer.chat_template == TINY_CHAT_TEMPLATE
    assert policy.tokenizer.eos_token == "<|im_end|>" and policy.model.config.vocab_size == 261

    def no_second_conversion(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(gguf_module, "convert_gguf", no_second_conversion)
    again = load_policy(str(gguf), adapter="lora", lora_rank=2)
    assert capsys.readouterr().err == ""
    assert again.fingerprint == policy.fingerprint
    assert torch.equal(_last_logits(again), _last_logits(policy))


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_an_unreadable_gguf_file_fails_clearly_and_leaves_nothing(damage, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FTIS_CACHE", str(tmp_path / "cache"))
    broken = tmp_path / "broken.gguf"
    if damage == "garbage":
        broken.write_bytes(bytes(range(256)) * 64)
    else:  # the header whole, the tensors cut off
        whole = write_tiny_gguf(tmp_path / "whole.gguf").read_bytes()
        broken.write_bytes(whole[: len(whole) * 2 // 3])
    with pytest.raises(ModelLoadError, match=r"broken\.gguf cannot be read as a GGUF file \([\d,]+ bytes: cut short"):
        load_policy(str(broken))
    assert "converting" not in capsys.readouterr().err
    cache = tmp_path / "cache" / "models"
    assert not cache.exists() or list(cache.iterdir()) == []


def test_a_missing_gguf_file_and_a_missing_real_model_say_what_to_do(tmp_path, monkeypatch):
    with pytest.raises(NotAModelError, match="no such GGUF file"):
        load_policy("nowhere.gguf")
    monkeypatch.setenv("FTIS_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"run `ftis-node models fetch gemma-3-270m`"):
        real_model_folder("gemma-3-270m")
    with pytest.raises(ValueError, match="unknown real model"):
        real_model_folder("gemma-7b")
    with pytest.raises(NotAModelError, match=r"run `ftis-node models fetch gemma-3-270m`"):  # --model by its name
        load_policy("gemma-3-270m")


def test_a_real_model_loads_by_its_name():
    folder = real_model("smollm2-135m-instruct")  # skipped before `ftis-node models fetch --all`
    policy = load_policy("smollm2-135m-instruct", adapter="lora", lora_rank=4)
    assert policy.name == "smollm2-135m-instruct" and policy.licence_files == (folder.absolute() / "LICENSE",)


@pytest.mark.parametrize("adapter", ["full", "lora"])
def test_an_export_carries_the_licence_files_of_the_weights_it_started_from(adapter, tmp_path, monkeypatch):
    # Gemma's terms travel with every copy of its weights, trained or not: an export of a policy that started from
    # a converted folder carries its licence files (beside base/ too), and loading the export checks them.
    from ftis.node.models import export_policy, load_export
    from ftis.node.models.gguf import convert_gguf

    terms = tmp_path / "TERMS.txt"
    terms.write_text("the terms\n")
    folder = convert_gguf(write_tiny_gguf(tmp_path / "tiny.gguf"), tmp_path / "converted", licence_files=[terms])
    policy = load_policy(str(folder), adapter=adapter, lora_rank=2)
    assert policy.licence_files == (folder.absolute() / "TERMS.txt",)
    export = export_policy(policy, tmp_path / "export", policy_version=3)
    holders = [export, export / "base"] if adapter == "lora" else [export]
    for holder in holders:
        assert (holder / "TERMS.txt").read_text() == "the terms\n"
        assert read_manifest(holder)["licence_files"] == ["TERMS.txt"]
    again = load_export(export)
    assert again.licence_files == (export.absolute() / "TERMS.txt",)
    (export / "TERMS.txt").unlink()
    with pytest.raises(LicenceFileMissing, match=r"TERMS\.txt"):
        load_export(export)
