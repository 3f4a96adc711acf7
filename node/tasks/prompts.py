"""The token ids a node conditions on for a problem: the task's prompt text, either raw or wrapped
in the model's chat template (one user turn, then the assistant's turn is opened).

Instruct models (``Qwen/Qwen2.5-1.5B-Instruct``) answer far better inside their chat template; the
tiny built-in models have no template and see the raw text. The setting is ``[model] chat_template``:
``auto`` uses the template when the tokenizer has one, ``on`` requires one, ``off`` never uses it.

Whatever is chosen, the ids are exactly what the generator conditions on and what the batch carries
as ``prompt_ids``. A receiving node trains on a peer's ``prompt_ids`` only when they are one of the
renderings of the named problem it makes itself (``renderings``: raw, and in the chat template where the
tokenizer has one), so a peer cannot put another prompt in front of a problem whose gold answer it likes.
"""

from typing import Literal

import numpy as np
from transformers import PreTrainedTokenizerBase

ChatTemplate = Literal["auto", "on", "off"]


class ChatTemplateError(ValueError):
    """``chat_template = "on"`` for a tokenizer that has no chat template."""


def uses_chat_template(tokenizer: PreTrainedTokenizerBase, setting: ChatTemplate) -> bool:
    """Whether prompts are wrapped in the tokenizer's chat template under ``setting``."""
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if setting == "on" and not has_template:
        raise ChatTemplateError("chat_template = 'on' but the model's tokenizer has no chat template; "
                                "use 'auto' or 'off'")
    return has_template and setting != "off"


def prompt_ids(tokenizer: PreTrainedTokenizerBase, text: str, *, chat: bool) -> np.ndarray:
    """The int64 token ids of ``text`` as the model sees it (template applied when ``chat``)."""
    if chat:
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=False,
                                                 add_generation_prompt=True)
        # The rendered template already holds every special token (BOS included where the model uses one).
        ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
    else:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise ValueError("the prompt is empty after tokenization")
    return np.asarray(ids, dtype=np.int64)


def renderings(tokenizer: PreTrainedTokenizerBase, text: str) -> tuple[np.ndarray, ...]:
    """Every form of ``text``'s prompt a node of this tokenizer may condition on: raw, and (when the tokenizer
    has a chat template) wrapped in it. Peers with the same tokenizer may have chosen either."""
    raw = prompt_ids(tokenizer, text, chat=False)
    if not getattr(tokenizer, "chat_template", None):
        return (raw,)
    return raw, prompt_ids(tokenizer, text, chat=True)
