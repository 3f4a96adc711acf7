"""The text column of a v3 batch: each completion's text, for peers whose tokenizer is not the generator's.

Wire form (the body's optional ``texts`` map): ``length`` = bin, one uint32 LE per completion (the bytes of
its text in UTF-8, completions in wire order), and ``data`` = one zstd frame of every text's UTF-8 bytes,
one after another, its content size and checksum in the frame, as the token column's (``columns.inflate``:
the one zstd code path). Absent, the batch carries no texts.

Decoding is bounded before anything is inflated: a text may hold at most
``MAX_TEXT_BYTES_PER_TOKEN`` bytes per token of its completion plus ``MAX_TEXT_SLACK_BYTES``, and the frame
must declare exactly the lengths' sum. Each text must be valid UTF-8 on its own (strict: no overlong forms,
no surrogates, no character cut between two completions). One inflate per batch, one UTF-8 decode per
completion.
"""

import numpy as np

from ftis.protocol.columns import deflate, inflate
from ftis.protocol.errors import DecodeError, EncodeError
from ftis.protocol.limits import MAX_TEXT_BYTES_PER_TOKEN, MAX_TEXT_SLACK_BYTES


def max_text_bytes(num_tokens: np.ndarray) -> np.ndarray:
    """(N,) the most UTF-8 bytes each completion's text may hold, from its token count."""
    return MAX_TEXT_BYTES_PER_TOKEN * num_tokens.astype(np.int64) + MAX_TEXT_SLACK_BYTES


def encode_texts(field: str, texts: tuple[str, ...]) -> list[bytes]:
    """Each text as UTF-8; ``EncodeError`` at ``{field}[c].text`` for one that is not a string or cannot
    be UTF-8 (a lone surrogate)."""
    encoded = []
    for c, text in enumerate(texts):
        if type(text) is not str:
            raise EncodeError(f"{field}[{c}].text", f"expected a string, got {type(text).__name__}")
        try:
            encoded.append(text.encode("utf-8"))
        except UnicodeEncodeError as error:
            raise EncodeError(f"{field}[{c}].text", f"not encodable as UTF-8 ({error.reason})") from None
    return encoded


def pack_texts(encoded: list[bytes]) -> dict[str, bytes]:
    """The body's ``texts`` map for these UTF-8 texts (every completion's, in wire order)."""
    return {"length": np.array([len(e) for e in encoded], "<u4").tobytes(), "data": deflate(b"".join(encoded))}


def check_text_lengths(field: str, lengths: np.ndarray, num_tokens: np.ndarray) -> None:
    """``DecodeError`` at ``{field}.length``, naming the completion, if a text's length (N,) is over the bound its
    completion's token count (N,) gives it: checked before the frame is inflated."""
    lengths, bounds = lengths.astype(np.int64), max_text_bytes(num_tokens)
    over = np.flatnonzero(lengths > bounds)
    if over.size:
        c = int(over[0])
        raise DecodeError(f"{field}.length", f"completion {c}'s text of {lengths[c]} bytes is over the bound of "
                                             f"{bounds[c]} for its {num_tokens[c]} tokens")


def unpack_texts(field: str, lengths: np.ndarray, data: bytes, num_tokens: np.ndarray) -> list[str]:
    """Each completion's text from the column's ``lengths`` (N,) and frame ``data``, given each completion's
    token count (N,); ``DecodeError`` at ``{field}.length`` or ``{field}.data``, naming the completion."""
    check_text_lengths(field, lengths, num_tokens)
    lengths = lengths.astype(np.int64)
    raw = memoryview(inflate(f"{field}.data", data, int(lengths.sum())))
    texts, at = [], 0
    for c, length in enumerate(lengths.tolist()):
        try:
            texts.append(str(raw[at : at + length], "utf-8"))  # strict: invalid UTF-8 raises
        except UnicodeDecodeError as error:
            raise DecodeError(f"{field}.data", f"completion {c}'s text is not valid UTF-8 ({error.reason} at "
                                               f"byte {error.start})") from None
        at += length
    return texts
