"""Stop strings: a completion also ends at the token that completes one of ``[generation] stop``.

A base model (Gemma 3 270M) never writes its end-of-sequence token: after ``</answer>`` it goes on with another
problem until ``max_new_tokens``. A stop string ends it where the answer ends. The completion keeps every token up
to and including the one that completes the string, its finish reason is "stop", and nothing sampled after it is
kept; the log-probs of the kept tokens are untouched (stopping is a function of the tokens already drawn, so the
kept tokens are a sample of the same distribution).

One rule serves every backend: at token t a completion has stopped when the text of its last ``window`` tokens
(up to and including t) contains a stop string. ``window`` covers the longest string even when every character
takes four byte-level tokens, so the first token at which a string is whole anywhere in the completion is the
token the rule stops at. The transformers backend applies it while it samples (so a rambling base model costs no
more than its answer); the vLLM backend, whose engine runs without a tokenizer, cuts its completions afterwards
(``cut``), which gives the same completions.
"""

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

TOKENS_PER_CHARACTER = 4  # a UTF-8 character is at most four bytes, and a byte-level token at least one


class StopStrings:
    """The stop strings of one tokenizer (module docstring)."""

    def __init__(self, tokenizer: "PreTrainedTokenizerBase", strings: Sequence[str]):
        if not strings or any(not text for text in strings):
            raise ValueError("stop strings must be non-empty, and at least one given")
        self.tokenizer = tokenizer
        self.strings = tuple(strings)
        self.window = TOKENS_PER_CHARACTER * max(len(text) for text in self.strings)

    def ended(self, windows: Sequence[Sequence[int]]) -> list[bool]:
        """For each row's last ``window`` tokens (oldest first), whether their text holds a stop string."""
        texts = self.tokenizer.batch_decode([list(row) for row in windows], skip_special_tokens=False)
        return [any(text in decoded for text in self.strings) for decoded in texts]

    def cut(self, token_ids: np.ndarray) -> int | None:
        """The length of ``token_ids`` up to and including the token that completes the first stop string; None
        when none is completed."""
        ids = [int(token) for token in token_ids]
        if not self.ended([ids])[0]:  # no string anywhere: the common case costs one decode
            return None
        windows = [ids[max(0, t + 1 - self.window) : t + 1] for t in range(len(ids))]
        return next(t + 1 for t, stopped in enumerate(self.ended(windows)) if stopped)
