"""load_policy: tiny names, folders and hub ids (faked: nothing downloads here), full and LoRA, errors."""

import warnings

import pytest
import torch

from ftis.node.models import (
    LoraRankClamped,
    ModelLoadError,
    NotAModelError,
    UnknownModelError,
    build_tiny_model,
    build_tokenizer,
    load_policy,
    loading,
)
from ftis.node.models.loading import DEFAULT_LORA_TARGETS

INPUT_IDS = torch.tensor([[4, 9, 21, 10, 25, 11, 5], [6, 12, 13, 7, 2, 0, 0]])  # (B=2, T=7)


def _logits(policy) -> torch.Tensor:
    with torch.no_grad():
        return policy.model(input_ids=INPUT_IDS).logits


def _lora_names(policy) -> set[str]:
    return {name for name, _ in policy.model.named_parameters() if "lora_" in name}


def test_full_fine_tuning_trains_everything():
    policy = load_policy("tiny-small", seed=3)
    assert policy.adapter == "full" and policy.name == "tiny-small" and policy.lora_rank is None
    assert policy.trainable_parameters() == list(policy.model.parameters())
    assert policy.fingerprint.startswith("sha256:")


def test_dtype_and_device():
    policy = load_policy("tiny-small", dtype="bfloat16", device="cpu")
    assert {parameter.dtype for parameter in policy.model.parameters()} == {torch.bfloat16}
    assert load_policy("tiny-small", dtype="auto").model.dtype == torch.float32


def test_lora_trains_only_the_adapter_and_clamps_the_rank():
    with pytest.warns(LoraRankClamped, match="using rank 16 and alpha 32"):
        policy = load_policy("tiny-small", adapter="lora")  # the paper's r=128, alpha=256
    assert (policy.lora_rank, policy.lora_alpha) == (16, 32)
    trainable = {name for name, parameter in policy.model.named_parameters() if parameter.requires_grad}
    assert trainable == _lora_names(policy) and trainable
    adapted = {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in trainable}
    assert adapted == set(DEFAULT_LORA_TARGETS)
    assert {id(p) for p in policy.trainable_parameters()} == {
        id(p) for name, p in policy.model.named_parameters() if name in trainable
    }


def test_a_small_rank_is_kept():
    with warnings.catch_warnings():
        warnings.simplefilter("error", LoraRankClamped)
        policy = load_policy("tiny-large", adapter="lora", lora_rank=8, lora_alpha=16, lora_target_modules=["q_proj"])
    assert (policy.lora_rank, policy.lora_alpha) == (8, 16)
    assert {name.split(".lora_")[0].rsplit(".", 1)[-1] for name in _lora_names(policy)} == {"q_proj"}


def test_a_lora_step_changes_only_the_adapter():
    policy = load_policy("tiny-medium", adapter="lora", lora_rank=4, lora_alpha=8, seed=1)
    before = {name: parameter.detach().clone() for name, parameter in policy.model.named_parameters()}
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-2)
    logits = policy.model(input_ids=INPUT_IDS).logits  # (B, T, V)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), INPUT_IDS[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    changed = {name for name, parameter in policy.model.named_parameters() if not torch.equal(parameter, before[name])}
    assert changed and changed <= _lora_names(policy)
    assert any("lora_B" in name for name in changed)  # B starts at zero and gets the first gradient


def test_lora_initialisation_follows_the_seed():
    first, again, other = (load_policy("tiny-small", adapter="lora", lora_rank=4, seed=seed) for seed in (5, 5, 6))
    a, b, c = (dict(policy.model.named_parameters()) for policy in (first, again, other))
    name = next(name for name in a if "lora_A" in name)
    assert torch.equal(a[name], b[name]) and not torch.equal(a[name], c[name])


def test_a_saved_model_loads_back_by_path(tmp_path):
    original = load_policy("tiny-medium", seed=4)
    original.model.save_pretrained(tmp_path / "model")
    original.tokenizer.save_pretrained(tmp_path / "model")
    loaded = load_policy(str(tmp_path / "model"))
    assert loaded.name == str(tmp_path / "model")
    assert loaded.fingerprint == original.fingerprint
    assert torch.equal(_logits(loaded), _logits(original))
    lora = load_policy(str(tmp_path / "model"), adapter="lora", lora_rank=4)  # a fresh adapter on a saved model
    assert torch.equal(_logits(lora), _logits(original))  # B = 0: the adapter starts as a no-op
    assert lora.base_model_id is None  # a local base: exports copy it


class _FakeHub:
    """Stands in for the hub: records what from_pretrained was asked, returns tiny stand-ins."""

    def __init__(self):
        self.calls = []

    def model(self, name, **kwargs):
        self.calls.append(("model", name, kwargs))
        model = build_tiny_model("tiny-small", seed=0)
        model.config._name_or_path = model.name_or_path = name  # as from_pretrained does; peft records it
        model.config.pad_token_id = model.generation_config.pad_token_id = None  # as in Qwen2.5's config.json
        return model

    def tokenizer(self, name, **kwargs):
        self.calls.append(("tokenizer", name, kwargs))
        tokenizer = build_tokenizer()
        tokenizer.pad_token = None  # like many hub tokenizers (Llama's, for one)
        return tokenizer


@pytest.fixture
def hub(monkeypatch):
    fake = _FakeHub()
    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", fake.model)
    monkeypatch.setattr(loading.AutoTokenizer, "from_pretrained", fake.tokenizer)
    return fake


def test_a_hub_id_goes_to_from_pretrained(hub):
    policy = load_policy("Qwen/Qwen2.5-1.5B-Instruct", dtype="bfloat16", revision="abc123")
    assert hub.calls == [
        ("tokenizer", "Qwen/Qwen2.5-1.5B-Instruct", {"revision": "abc123"}),
        ("model", "Qwen/Qwen2.5-1.5B-Instruct", {"revision": "abc123", "dtype": torch.bfloat16}),
    ]
    assert policy.name == "Qwen/Qwen2.5-1.5B-Instruct" and policy.revision == "abc123"
    assert policy.base_model_id is None  # full fine-tuning: exports carry all the weights anyway


def test_a_hub_lora_records_its_base_and_gets_a_pad_token(hub):
    policy = load_policy("Qwen/Qwen2.5-3B-Instruct", adapter="lora", lora_rank=8, dtype="auto")
    assert hub.calls[1][2]["dtype"] == "auto"
    assert policy.base_model_id == "Qwen/Qwen2.5-3B-Instruct"
    assert policy.tokenizer.pad_token == policy.tokenizer.eos_token
    assert policy.model.config.pad_token_id == policy.tokenizer.eos_token_id
    assert policy.model.generation_config.pad_token_id == policy.tokenizer.eos_token_id
    assert policy.model.peft_config["default"].base_model_name_or_path == "Qwen/Qwen2.5-3B-Instruct"


def test_a_hub_id_that_cannot_be_loaded(monkeypatch):
    def offline(name, **kwargs):
        raise OSError(f"We couldn't connect to 'https://huggingface.co' to load the files of {name}")

    monkeypatch.setattr(loading.AutoTokenizer, "from_pretrained", offline)
    with pytest.raises(ModelLoadError, match="not a local folder, and loading it from the hub failed"):
        load_policy("runs/export")  # one slash: it could be a hub id, so it is tried as one


def test_unknown_tiny_name():
    with pytest.raises(UnknownModelError, match="tiny-small, tiny-medium, tiny-large"):
        load_policy("tiny-xl")


@pytest.mark.parametrize("missing", ["./runs/export", "/no/such/model", "~/no-such-model", "runs/a/export"])
def test_missing_folder(missing):
    with pytest.raises(NotAModelError, match="no such model folder"):
        load_policy(missing)


def test_a_folder_or_file_that_is_not_a_model(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    for path in (tmp_path, tmp_path / "notes.txt"):
        with pytest.raises(NotAModelError, match="not a model folder"):
            load_policy(str(path))


def test_bad_arguments():
    with pytest.raises(ValueError, match="adapter"):
        load_policy("tiny-small", adapter="qlora")
    with pytest.raises(ValueError, match="dtype"):
        load_policy("tiny-small", dtype="int8")
    with pytest.raises(ValueError, match="lora_rank"):
        load_policy("tiny-small", adapter="lora", lora_rank=0)
    with pytest.raises(ModelLoadError, match="none of the LoRA target modules"):
        load_policy("tiny-small", adapter="lora", lora_target_modules=["c_attn"])
    assert issubclass(ModelLoadError, ValueError)
