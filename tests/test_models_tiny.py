"""The built-in tiny models: sizes, a forward pass, the character models' shared tokenizer, weights determined by
the seed."""

import pytest
import torch

from ftis.node.models import (
    TINY_MODELS,
    build_tiny_model,
    build_tiny_tokenizer,
    build_tokenizer,
    load_policy,
    tokenizer_fingerprint,
)

# Pinned: a change here changes every tiny run's numbers (and the table in tiny.py's docstring).
PARAMETERS = {"tiny-small": 105_344, "tiny-medium": 506_112, "tiny-large": 1_939_584, "tiny-small-bpe": 114_432}
CHARACTER_MODELS = ["tiny-small", "tiny-medium", "tiny-large"]  # the three sizes on the character tokenizer


def _count(model: torch.nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def test_the_table_names_three_sizes_and_a_bpe_model():
    assert list(TINY_MODELS) == list(PARAMETERS)
    configs = [TINY_MODELS[name].config() for name in CHARACTER_MODELS]
    for field in ("hidden_size", "num_hidden_layers"):
        values = [getattr(config, field) for config in configs]
        assert values == sorted(set(values)), field  # strictly growing
    assert len({config.num_attention_heads for config in configs}) > 1


@pytest.mark.parametrize("name", list(TINY_MODELS))
def test_parameter_count_and_forward_pass(name):
    model = build_tiny_model(name)
    assert _count(model) == PARAMETERS[name]
    tokenizer = build_tiny_tokenizer(name)
    batch = tokenizer(["<think>1+2=3</think>", "<answer>12</answer>"], padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (*batch["input_ids"].shape, len(tokenizer))  # (B, T, V)
    assert torch.isfinite(logits).all()
    assert not model.training


def test_heterogeneous_sizes_share_the_tokenizer_and_the_bpe_model_has_its_own():
    policies = [load_policy(name) for name in CHARACTER_MODELS]
    assert len({policy.fingerprint for policy in policies}) == 1
    assert policies[0].fingerprint == tokenizer_fingerprint(build_tokenizer())
    bpe = load_policy("tiny-small-bpe")
    assert bpe.fingerprint != policies[0].fingerprint
    for policy in [*policies, bpe]:
        config = policy.model.config
        assert config.vocab_size == len(policy.tokenizer)
        assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (
            policy.tokenizer.pad_token_id, policy.tokenizer.bos_token_id, policy.tokenizer.eos_token_id
        )


def test_the_seed_determines_the_weights():
    first, again, other = (build_tiny_model("tiny-small", seed=seed) for seed in (1, 1, 2))
    for (name, a), b, c in zip(first.state_dict().items(), again.state_dict().values(), other.state_dict().values(),
                               strict=True):
        assert torch.equal(a, b), name
        if "norm" not in name:  # norms start at one whatever the seed
            assert not torch.equal(a, c), name


def test_building_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny_model("tiny-medium", seed=7)
    assert torch.equal(torch.rand(3), expected)


def test_unknown_name_is_a_key_error():
    with pytest.raises(KeyError):
        build_tiny_model("tiny-huge")
