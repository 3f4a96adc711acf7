"""The built-in BPE tokenizer and ``tiny-small-bpe``: other ids than the character tokenizer's for the same text,
the same behaviour otherwise (tags, special tokens, exact round trips), and a model that loads, exports,
reloads and warms up like the character models."""

import pytest
import torch
from transformers import AutoTokenizer

from ftis.node.models import (
    build_bpe_tokenizer,
    build_tiny_model,
    build_tokenizer,
    export_policy,
    load_export,
    load_policy,
    tokenizer_fingerprint,
)
from ftis.node.models.bpe_tokenizer import BPE_VOCABULARY, MERGES, PIECES
from ftis.node.models.tokenizer import DIGITS, TAGS, VOCABULARY
from ftis.node.tasks import ArithmeticSettings, ArithmeticTask
from ftis.node.warmup import WarmupPlan, WarmupSpec, cache_key, demonstration, supervised_warmup

# Pinned: changing it changes the ids every tiny-small-bpe model and every batch it publishes uses.
FINGERPRINT = "sha256:0bf05a7fffd6e29850dff66db40c20473f913a2872b22ccc521de75776c8232d"
TAGGED = "<think> 47+38=85 </think>\n<answer> 85 </answer>"


@pytest.fixture(scope="module")
def bpe():
    return build_bpe_tokenizer()


@pytest.fixture(scope="module")
def char():
    return build_tokenizer()


def test_the_fingerprint_is_pinned_and_differs_from_the_character_tokenizer(bpe, char):
    assert tokenizer_fingerprint(bpe) == tokenizer_fingerprint(build_bpe_tokenizer()) == FINGERPRINT
    assert tokenizer_fingerprint(char) != FINGERPRINT


def test_the_vocabulary_extends_the_character_one_with_one_token_per_merge(bpe):
    assert BPE_VOCABULARY[: len(VOCABULARY)] == VOCABULARY  # the same ids for what both have
    assert len(bpe) == len(BPE_VOCABULARY) == len(VOCABULARY) + len(MERGES) == 247
    assert MERGES[:100] == tuple((a, b) for a in DIGITS for b in DIGITS)
    for piece in PIECES:
        assert bpe.tokenize(piece) == [piece]


def test_answers_and_prompts_split_differently(bpe, char):
    assert bpe.tokenize("47+38=") == ["47", "+", "38", "="]
    assert (len(bpe.encode("47+38=")), len(char.encode("47+38="))) == (4, 6)
    assert bpe.tokenize("85") == ["85"] and len(char.encode("85")) == 2
    assert bpe.tokenize("123") == ["12", "3"]  # of two adjacent digit pairs, the one listed first merges
    assert bpe.encode("85") != char.encode("85")


def test_special_tokens_and_tags_behave_as_in_the_character_tokenizer(bpe, char):
    special = ("pad_token_id", "bos_token_id", "eos_token_id", "unk_token_id")
    assert [getattr(bpe, name) for name in special] == [getattr(char, name) for name in special] == [0, 1, 2, 3]
    assert [bpe.convert_tokens_to_ids(tag) for tag in TAGS] == [4, 5, 6, 7]
    ids = bpe.encode(TAGGED)
    assert bpe("12")["input_ids"] == bpe.encode("12") == [len(VOCABULARY) + 12]  # no special tokens added
    assert bpe.decode([bpe.bos_token_id, *ids, bpe.eos_token_id, bpe.pad_token_id], skip_special_tokens=True) == TAGGED
    assert bpe.encode("1é2") == [9, bpe.unk_token_id, 10]


@pytest.mark.parametrize("answer_format", ["plain", "tags"])
def test_every_task_string_survives_a_round_trip(bpe, answer_format):
    task = ArithmeticTask(ArithmeticSettings(max_digits=2, operations="+-*", operand_draw="value",
                                             format=answer_format))
    for split in ("train", "dev", "test", "ood"):
        for index in range(50):
            problem = task.problem(split, index)
            for text in (task.prompt(problem), demonstration(task, problem), problem.answer):
                ids = bpe.encode(text)
                assert bpe.unk_token_id not in ids
                assert bpe.decode(ids) == text == bpe.decode(ids, skip_special_tokens=True)


def test_tiny_small_bpe_is_tiny_small_on_the_bpe_vocabulary():
    small, bpe_model = build_tiny_model("tiny-small"), build_tiny_model("tiny-small-bpe")
    assert bpe_model.config.vocab_size == 247 and small.config.vocab_size == 105
    for field in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                  "intermediate_size", "pad_token_id", "bos_token_id", "eos_token_id"):
        assert getattr(bpe_model.config, field) == getattr(small.config, field), field


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")  # peft 0.21 on transformers 5
@pytest.mark.parametrize("adapter", ["full", "lora"])
def test_tiny_small_bpe_loads_exports_and_reloads(tmp_path, adapter):
    policy = load_policy("tiny-small-bpe", adapter=adapter, lora_rank=4, lora_alpha=8, seed=1)
    assert policy.fingerprint == FINGERPRINT and len(policy.tokenizer) == 247
    ids = torch.tensor([policy.tokenizer.encode(TAGGED)])  # (1, T)
    folder = export_policy(policy, tmp_path / "export")
    loaded = load_export(folder)  # refuses a tokenizer whose fingerprint changed on the way
    assert (loaded.name, loaded.adapter, loaded.fingerprint) == ("tiny-small-bpe", adapter, FINGERPRINT)
    with torch.no_grad():
        assert torch.equal(loaded.model(input_ids=ids).logits, policy.model(input_ids=ids).logits)
    tokenizer_folder = folder / "base" if adapter == "lora" else folder
    assert tokenizer_fingerprint(AutoTokenizer.from_pretrained(tokenizer_folder)) == FINGERPRINT


def test_a_short_warmup_of_tiny_small_bpe_raises_its_accuracy():
    policy = load_policy("tiny-small-bpe", seed=0)
    task = ArithmeticTask(ArithmeticSettings(max_digits=1, operations="+"))
    plan = WarmupPlan(steps=100, learning_rate=3e-3, batch_size=32, eval_problems=50)
    result = supervised_warmup(policy, task, plan, seed=0)
    assert result.last_loss < result.first_loss / 3
    assert result.accuracy_after >= result.accuracy_before + 0.2


def test_its_warm_starts_are_cached_apart_from_the_character_model():
    spec = WarmupSpec("tiny-small-bpe", seed=0, data=ArithmeticSettings(max_digits=1, operations="+"),
                      plan=WarmupPlan(steps=4, learning_rate=3e-3, batch_size=8))
    key, char_key = cache_key(spec), cache_key(WarmupSpec("tiny-small", spec.seed, spec.data, spec.plan))
    assert key.startswith("tiny-small-bpe-") and char_key.startswith("tiny-small-")
    assert key.rsplit("-", 1)[1] != char_key.rsplit("-", 1)[1]  # the recipes' hashes differ, not only the names
