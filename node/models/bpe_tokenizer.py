"""The second built-in tokenizer: a small BPE over the character tokenizer's alphabet, for tiny models whose
token ids differ from the character models' (collaboration across tokenizers, docs/tokenizers.md).

    from ftis.node.models.bpe_tokenizer import build_bpe_tokenizer
    tokenizer = build_bpe_tokenizer()
    tokenizer.tokenize("47+38=85")  # ['47', '+', '38', '=', '85']: 5 tokens where the character tokenizer has 8

Like the character tokenizer (``tokenizer.py``), every merge is written out below, so the ids are the same
on every machine and in every run, and nothing is trained or downloaded. The vocabulary is the character
tokenizer's, in the same order (``<pad>``=0, ``<bos>``=1, ``<eos>``=2, ``<unk>``=3, the tags 4–7, then the
characters), followed by one token per merge, in merge order:

1. every pair of digits, "00" … "99" (100 merges): a 2-digit number is one token, a 3-digit one two
   ("123" is "12" "3": of two adjacent pairs, BPE merges the one listed first);
2. the words of the tasks' prompts (``PIECES``), each spelled out left to right ("Pr", "Pro", ... "Problem").

So the same text gets other ids and, for most answers, another number of tokens ("85" is one token here,
two there): per-token log-probs cannot be compared between the two, only a whole completion's. What it
keeps from the character tokenizer: no pre-tokenizer (spaces and newlines are ordinary characters that
merges may join), ``decode(encode(text)) == text`` for any text of the alphabet (the decoder concatenates
the tokens), unknown characters become ``<unk>``, the special tokens are special and the four tags are
ordinary added tokens matched whole (``skip_special_tokens=True`` keeps the tags), and encoding adds no
special token.
"""

from tokenizers import AddedToken, Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

from ftis.node.models.tokenizer import BOS, DIGITS, EOS, PAD, SPECIAL_TOKENS, TAGS, UNK, VOCABULARY

# Words of the arithmetic task's prompts and of the tag format's instruction (node/tasks/tags.py). Each one
# alone is one token (tested); the order matters where spellings share a pair: "think" before "inside", or
# the earlier ("i", "n") would split "think" into "th", "in", "k".
PIECES = ("Problem: ", "What is ", "think", "answer", "final", "inside", "integer", "tags", "the")


def _spelled(piece: str) -> list[tuple[str, str]]:
    """The merges that build ``piece`` from its characters, left to right: ("a", "n"), ("an", "s"), ..."""
    return [(piece[:end - 1], piece[end - 1]) for end in range(2, len(piece) + 1)]


def _merges() -> list[tuple[str, str]]:
    """Every merge, in rank order (earlier merges win), without repeats."""
    merges = [(first, second) for first in DIGITS for second in DIGITS]
    for piece in PIECES:
        merges += [merge for merge in _spelled(piece) if merge not in merges]
    return merges


MERGES: tuple[tuple[str, str], ...] = tuple(_merges())
BPE_VOCABULARY: tuple[str, ...] = (*VOCABULARY, *(first + second for first, second in MERGES))  # position = id


def build_bpe_tokenizer() -> PreTrainedTokenizerFast:
    """The built-in BPE tokenizer: the character tokenizer's 105 ids, then one id per merge (module docstring)."""
    assert len(set(BPE_VOCABULARY)) == len(BPE_VOCABULARY), "a merge makes a token that is already listed"
    vocab = {token: index for index, token in enumerate(BPE_VOCABULARY)}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=list(MERGES), unk_token=UNK))
    backend.decoder = decoders.Fuse()  # concatenate the tokens: no spaces inserted between them
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS])
    backend.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in TAGS])
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=PAD, bos_token=BOS, eos_token=EOS, unk_token=UNK
    )
