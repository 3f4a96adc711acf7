"""The built-in character-level tokenizer, and the tokenizer fingerprint for any HF tokenizer."""

import string

import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from ftis.node.models.tokenizer import (
    CHARACTERS,
    TAGS,
    VOCABULARY,
    _canonical_model,
    build_tokenizer,
    tokenizer_fingerprint,
)

ARITHMETIC = "What is 12 + 7 * (3 - 1) / 2 ^ 2 % 5?\nAnswer: 15.5, -4 = x"
TAGGED = "<think>12 + 7 = 19\n19 * 2 = 38</think><answer>38</answer>"


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.mark.parametrize("text", [ARITHMETIC, TAGGED, string.ascii_letters, "a\tb  c\n\n"])
def test_round_trip(tokenizer, text):
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert tokenizer.decode(ids, skip_special_tokens=True) == text  # the tags are not "special"


def test_one_token_per_character_and_per_tag(tokenizer):
    assert len(tokenizer.encode(ARITHMETIC)) == len(ARITHMETIC)
    for tag in TAGS:
        (tag_id,) = tokenizer.encode(tag)
        assert tokenizer.convert_ids_to_tokens(tag_id) == tag
    ids = tokenizer.encode(TAGGED)
    assert len(ids) == len(TAGGED) - sum(TAGGED.count(tag) * (len(tag) - 1) for tag in TAGS)


def test_the_alphabet(tokenizer):
    for group in (string.digits, string.ascii_lowercase, string.ascii_uppercase, string.punctuation, " \n\t"):
        assert set(group) <= set(CHARACTERS)
    for character in CHARACTERS:
        (token_id,) = tokenizer.encode(character)
        assert VOCABULARY[token_id] == character
    assert len(tokenizer) == len(VOCABULARY) == 105


def test_ids_are_fixed(tokenizer):
    # Pinned: changing these changes the ids every tiny model and every published batch uses.
    special_ids = (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id)
    assert special_ids == (0, 1, 2, 3)
    assert [tokenizer.convert_tokens_to_ids(tag) for tag in TAGS] == [4, 5, 6, 7]
    assert tokenizer.encode("<answer>1+2=3</answer>") == [6, 9, 21, 10, 25, 11, 7]
    assert build_tokenizer().encode(TAGGED) == tokenizer.encode(TAGGED)


def test_no_special_tokens_are_added_and_unknown_characters_are_unk(tokenizer):
    assert tokenizer("12")["input_ids"] == tokenizer.encode("12") == [9, 10]
    assert tokenizer.encode("1é2") == [9, tokenizer.unk_token_id, 10]


def test_batches_pad_with_pad(tokenizer):
    batch = tokenizer(["1+1", "12+13"], padding=True)
    assert batch["input_ids"][0][-2:] == [tokenizer.pad_token_id] * 2
    assert batch["attention_mask"][0] == [1, 1, 1, 0, 0]


# --- the fingerprint ----------------------------------------------------------------------------------


def _bpe_tokenizer(merges, *, lowercase=False, extra_token=None, decoder=True, eos="</s>"):
    """A small BPE tokenizer built in code, with knobs that do or do not change its ids."""
    vocab = {"<unk>": 0, "</s>": 1, "<pad>": 2, "a": 3, "b": 4, "c": 5, "ab": 6, "bc": 7, " ": 8}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    if lowercase:
        backend.normalizer = normalizers.Lowercase()
    if decoder:
        backend.decoder = decoders.Fuse()
    backend.add_special_tokens([AddedToken(token, special=True) for token in ("<unk>", "</s>", "<pad>")])
    if extra_token:
        backend.add_tokens([AddedToken(extra_token, special=False)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=eos, unk_token="<unk>")


def test_fingerprint_format_and_stability(tokenizer):
    fingerprint = tokenizer_fingerprint(tokenizer)
    assert fingerprint.startswith("sha256:") and len(fingerprint) == len("sha256:") + 64
    assert tokenizer_fingerprint(build_tokenizer()) == fingerprint
    tokenizer(["1", "123"], padding=True, truncation=True, max_length=2)  # leaves state in the backend
    assert tokenizer_fingerprint(tokenizer) == fingerprint


def test_fingerprint_survives_save_and_load(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    assert tokenizer_fingerprint(AutoTokenizer.from_pretrained(tmp_path)) == tokenizer_fingerprint(tokenizer)
    other = _bpe_tokenizer([("a", "b")])
    other.save_pretrained(tmp_path / "other")
    assert tokenizer_fingerprint(AutoTokenizer.from_pretrained(tmp_path / "other")) == tokenizer_fingerprint(other)


def test_fingerprint_ignores_what_does_not_change_ids():
    reference = tokenizer_fingerprint(_bpe_tokenizer([("a", "b")]))
    assert tokenizer_fingerprint(_bpe_tokenizer([("a", "b")], decoder=False)) == reference
    assert tokenizer_fingerprint(_bpe_tokenizer([("a", "b")], eos="<pad>")) == reference  # like Qwen base vs Instruct
    no_pad = _bpe_tokenizer([("a", "b")])
    no_pad.pad_token = no_pad.eos_token  # what load_policy does for a tokenizer without one
    assert tokenizer_fingerprint(no_pad) == reference


def test_fingerprint_changes_when_any_id_mapping_changes():
    reference = _bpe_tokenizer([("a", "b")])
    variants = {
        "other merges": _bpe_tokenizer([("b", "c")]),
        "lowercasing": _bpe_tokenizer([("a", "b")], lowercase=True),
        "an added token": _bpe_tokenizer([("a", "b")], extra_token="<tool>"),
        "the built-in tokenizer": build_tokenizer(),
    }
    assert reference.encode("abc") != variants["other merges"].encode("abc")  # the ids really differ
    fingerprints = {name: tokenizer_fingerprint(variant) for name, variant in variants.items()}
    assert tokenizer_fingerprint(reference) not in fingerprints.values()
    assert len(set(fingerprints.values())) == len(fingerprints)


def test_fingerprint_of_a_vocabulary_with_two_ids_swapped(tokenizer):
    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str().replace('"x":', '"tmp":').replace(
        '"y":', '"x":').replace('"tmp":', '"y":'))
    swapped = PreTrainedTokenizerFast(tokenizer_object=backend)
    assert swapped.encode("x") == tokenizer.encode("y")
    assert tokenizer_fingerprint(swapped) != tokenizer_fingerprint(tokenizer)


def test_merges_in_either_serialization_are_the_same():
    old_style = {"type": "BPE", "vocab": {"b": 1, "a": 0}, "merges": ["a b"]}
    new_style = {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"]]}
    assert _canonical_model(old_style) == _canonical_model(new_style)


def test_fingerprint_of_a_tokenizer_without_a_backend():
    class PythonTokenizer:  # the shape of a slow (pure-Python) HF tokenizer
        def __init__(self, vocab):
            self.vocab = vocab
            self.added_tokens_decoder = {len(vocab): "<extra>"}

        def get_vocab(self):
            return dict(self.vocab)

    first = tokenizer_fingerprint(PythonTokenizer({"a": 0, "b": 1}))
    assert first == tokenizer_fingerprint(PythonTokenizer({"b": 1, "a": 0}))
    assert first != tokenizer_fingerprint(PythonTokenizer({"a": 1, "b": 0}))
