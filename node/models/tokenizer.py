"""The built-in character-level tokenizer of the tiny models, and the tokenizer fingerprint.

    from ftis.node.models.tokenizer import build_tokenizer, tokenizer_fingerprint
    tokenizer = build_tokenizer()
    tokenizer.encode("<think>12+3=15</think><answer>15</answer>")  # one id per character, one per tag

The vocabulary is a fixed, ordered list written out below, so the ids are the same on every machine
and in every run: the special tokens first, then the four tags, then one token per character. Like
Qwen2.5's tokenizer, encoding adds no special tokens; a character outside the alphabet becomes
``<unk>`` (rather than vanishing, which would make decode(encode(text)) silently differ from text).

The tags are ordinary (non-special) added tokens: they are matched as one token each, and
``decode(..., skip_special_tokens=True)`` keeps them, which the reward functions need.

``tokenizer_fingerprint`` identifies how any Hugging Face tokenizer maps text to ids (docs/protocol.md: peers
whose fingerprint differs cannot use each other's token ids).
"""

import hashlib
import json
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK)
TAGS = ("<think>", "</think>", "<answer>", "</answer>")

# Written out rather than taken from ``string`` so that the id of every character is visible here.
DIGITS = "0123456789"
WHITESPACE = " \n\t"
PUNCTUATION = "+-*/=^%()[]{}<>.,:;!?'\"_#$&@|\\~`"  # arithmetic operators first, then the rest
LOWERCASE = "abcdefghijklmnopqrstuvwxyz"
UPPERCASE = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
CHARACTERS = DIGITS + WHITESPACE + PUNCTUATION + LOWERCASE + UPPERCASE

VOCABULARY: tuple[str, ...] = (*SPECIAL_TOKENS, *TAGS, *CHARACTERS)  # position = token id


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The built-in tokenizer: ``<pad>``=0, ``<bos>``=1, ``<eos>``=2, ``<unk>``=3, the tags 4–7, then characters."""
    assert len(set(VOCABULARY)) == len(VOCABULARY), "a character is listed twice"
    vocab = {token: index for index, token in enumerate(VOCABULARY)}
    # A BPE model with no merges is a character-level tokenizer: every word splits into its characters
    # and nothing joins them again. There is no pre-tokenizer, so spaces and newlines are tokens too.
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    backend.decoder = decoders.Fuse()  # concatenate the tokens: no spaces inserted between characters
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS])
    backend.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TAGS])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=PAD, bos_token=BOS, eos_token=EOS, unk_token=UNK
    )


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """``"sha256:<hex>"`` of what decides the token ids of ``tokenizer``, for any Hugging Face tokenizer.

    Fast tokenizers: the backend's vocabulary and merges (the model section), normalizer, pre-tokenizer,
    post-processor (it inserts special tokens) and added tokens, as canonical JSON. Left out because they
    do not change which id a piece of text gets: the decoder, the padding and truncation state (the
    backend keeps the last call's), and which token the wrapper calls pad/eos (so setting pad = eos,
    or Qwen2.5 base vs Instruct, which differ only in their eos, keeps the fingerprint).

    Tokenizers without a backend (Python/sentencepiece ones): the class name, the vocabulary and the
    added tokens — weaker, as the sentencepiece scores are not included.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        serialized = json.loads(backend.to_str())
        identity: Any = {
            "model": _canonical_model(serialized["model"]),
            **{key: serialized.get(key) for key in ("normalizer", "pre_tokenizer", "post_processor", "added_tokens")},
        }
    else:
        identity = {
            "class": type(tokenizer).__name__,
            "vocab": sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]),
            "added_tokens": sorted((index, str(token)) for index, token in tokenizer.added_tokens_decoder.items()),
        }
    blob = json.dumps(identity, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _canonical_model(model: dict[str, Any]) -> dict[str, Any]:
    """The model section with its vocabulary ordered by id and BPE merges as pairs.

    Older ``tokenizers`` versions write a merge as ``"a b"``, newer ones as ``["a", "b"]``: the same
    tokenizer must get the same fingerprint from both.
    """
    canonical = dict(model)
    vocab = canonical.get("vocab")
    if isinstance(vocab, dict):  # BPE and WordPiece: token -> id (Unigram's is already a list)
        canonical["vocab"] = sorted(vocab.items(), key=lambda item: item[1])
    merges = canonical.get("merges")
    if isinstance(merges, list):
        canonical["merges"] = [merge.split(" ", 1) if isinstance(merge, str) else list(merge) for merge in merges]
    return canonical
