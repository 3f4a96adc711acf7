"""A peer's group made trainable here when its generator used another tokenizer (docs/loss.md): its token ids
mean nothing to this node, so the group is rebuilt from what both sides share.

- The prompt: this node renders the problem the group names, from its own copy of the task, as it renders its
  own prompts (the generator's prompt ids are not read).
- The completions: each completion's text (protocol v3 carries it), tokenized by this node's tokenizer as plain
  text (a special token's string in it stays characters, as the generator's decoding left them) and as it
  follows a prompt (``Retokenizer.tokens``), plus this
  node's end token where the generator stopped on its own (finish "stop"): the generator's log-prob includes the
  end it sampled, so π_θ(y) includes this node's. In the chat template the end of an assistant turn
  (``<|im_end|>`` for Qwen2, ``<|end|>`` for Phi-3), else the end-of-sequence token. Not where the text holds one
  of this node's own stop strings (``[generation] stop``): this node's completions end there without an end token
  (a base model that never writes one would find it nearly impossible, and filter every such completion), so the
  text is cut after the first one, as this node's own completion would be ("27\n\n" is "27\n" to a node that
  stops at "\n"; its reward is the whole text's).
- The generator's log π_gen(y): its sampler log-probs summed over its own tokens (``TrainingGroup.sampler_sums``
  of the wire group), one number per completion, which the per-sequence loss compares with this node's.

A text a peer sends is as much its claim as its log-probs are: the loss bounds what either can do (docs/loss.md).
What a text costs this node is bounded here, before it is tokenized: a text of more than
``MAX_CHARACTERS_PER_TOKEN × max_tokens`` characters, or one of more than ``max_tokens`` tokens once tokenized,
makes its group unusable, and the group's texts are tokenized one at a time, stopping at the first too long. So a
peer cannot make this node tokenize more than that many characters, or train on more than that many tokens, per
completion.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ftis.node.tasks import Problem, Task
from ftis.node.tasks.prompts import Prompter, uses_bos
from ftis.protocol.schema import CompletionColumns, Group

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# A completion's tokens here, at most, for each token this node would sample itself (generation.max_new_tokens):
# the same text is at most a few times longer in one tokenizer than in another (a character tokenizer against a
# 150k-token BPE: ~4x on English and arithmetic), so 4x keeps every honest completion and bounds a peer's cost.
RETOKENIZED_PER_TOKEN = 4
# Characters a text may have for each token it may become here, checked before tokenizing: text averages 3-5
# characters a token under a large BPE, so 16 keeps every honest completion, and a peer's 2 MB text costs this
# node a length check, not seconds of tokenizing and gigabytes of memory.
MAX_CHARACTERS_PER_TOKEN = 16
# UTF-8 spends at most this many bytes on a character.
_MAX_UTF8_BYTES_PER_CHARACTER = 4
_ANCHOR = "\n"  # what a completion's text is tokenized after: a prompt ends with one in every template
_END_MARK = "\u2063ftis-end-mark\u2063"  # an assistant turn's content when rendering the template's end of a turn


@dataclass(frozen=True)
class Retokenizer:
    """How this node turns another tokenizer's group into its own tokens."""

    tokenizer: "PreTrainedTokenizerBase"
    chat: bool  # prompts wrapped in the chat template, as this node's own are
    max_tokens: int  # this node's tokens one completion may have
    end_id: int | None  # appended to a completion that stopped: the end of a turn (chat) or of the sequence
    prompter: Prompter | None = None  # how this node renders its own prompts (None: one-turn prompts)
    stop: tuple[str, ...] = ()  # this node's stop strings: a text holding one already ends as this node's would

    @classmethod
    def for_node(cls, tokenizer: "PreTrainedTokenizerBase", chat: bool, max_new_tokens: int,
                 prompter: Prompter | None = None, stop: Sequence[str] = ()) -> "Retokenizer":
        return cls(tokenizer, chat, RETOKENIZED_PER_TOKEN * max_new_tokens, end_of_turn(tokenizer, chat), prompter,
                   tuple(stop))

    def prompt(self, task: Task, problem: Problem) -> np.ndarray:
        """``problem``'s prompt as this node renders its own (its ``prompter`` when it is ``task``'s)."""
        prompter = self.prompter
        if prompter is None or prompter.task is not task:
            prompter = Prompter(self.tokenizer, task, self.chat, uses_bos(self.tokenizer, "auto"))
        return prompter.ids(problem)

    def completions(self, group: Group, rewards: np.ndarray) -> CompletionColumns | None:
        """The group's completions as this node's tokens of their texts, with ``rewards``; None when a completion
        is empty here or too long (the group is unusable)."""
        columns = group.columns
        texts = columns.texts
        assert texts is not None, "a group without texts cannot be tokenized here"
        if max(len(text) for text in texts) > MAX_CHARACTERS_PER_TOKEN * self.max_tokens:
            return None
        rows = []
        for text, finish in zip(texts, columns.finish_reasons, strict=True):
            text, own_stop = self.until_stop(text)
            tokens = self.tokens(text)
            row = [*tokens, self.end_id] if finish == "stop" and self.end_id is not None and not own_stop else tokens
            if not 1 <= len(row) <= self.max_tokens:
                return None
            rows.append(row)
        lengths = np.array([len(row) for row in rows], np.int64)
        ids = np.concatenate([np.asarray(row, np.int64) for row in rows])
        return CompletionColumns(
            token_ids=ids,
            sampler_logprobs=np.zeros(len(ids), np.float32),  # none per token: sequence_logprobs holds the claim
            lengths=lengths,
            rewards=np.asarray(rewards, np.float64),
            finish_reasons=columns.finish_reasons,
            texts=texts,
        )


    def until_stop(self, text: str) -> tuple[str, bool]:
        """``text`` up to the end of the first of this node's stop strings in it (this node's own completion would
        end there: "27\n\n" is "27\n" to a node that stops at "\n"), and whether it holds one."""
        ends = [text.index(end) + len(end) for end in self.stop if end in text]
        return (text[: min(ends)], True) if ends else (text, False)

    def tokens(self, text: str) -> list[int]:
        """``text`` in this node's tokens as they follow a prompt: tokenized after a newline, whose own ids are then
        dropped (a sentencepiece tokenizer, Phi-3's, starts a string alone with a space it would not put after its
        prompt); alone where the newline's ids do not come out first."""
        ids = self._ids(_ANCHOR + text)
        anchor = self._ids(_ANCHOR)
        return ids[len(anchor):] if ids[: len(anchor)] == anchor else self._ids(text)

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]


def usable_text_bytes(max_new_tokens: int) -> int:
    """The UTF-8 bytes of the longest completion text a node sampling up to ``max_new_tokens`` tokens could train on
    (``Retokenizer.completions`` finds a longer one unusable whatever its characters): a transport refuses a batch
    with a longer text before inflating any (``InboxLimits.max_text_bytes``)."""
    return _MAX_UTF8_BYTES_PER_CHARACTER * MAX_CHARACTERS_PER_TOKEN * RETOKENIZED_PER_TOKEN * max_new_tokens


def end_of_turn(tokenizer: "PreTrainedTokenizerBase", chat: bool) -> int | None:
    """The token that ends this node's completions: in the chat template, the special token that follows an
    assistant turn's content (found by rendering one); else, or when the template says none, the end of sequence."""
    eos = tokenizer.eos_token_id
    if not chat:
        return eos
    turn = [{"role": "user", "content": "?"}, {"role": "assistant", "content": _END_MARK}]
    try:
        rendered = tokenizer.apply_chat_template(turn, tokenize=False)
    except Exception:  # a template that cannot render an assistant turn: templates fail in many ways
        return eos
    if not isinstance(rendered, str) or _END_MARK not in rendered:
        return eos
    after = tokenizer(rendered.split(_END_MARK, 1)[1], add_special_tokens=False)["input_ids"]
    added = tokenizer.added_tokens_decoder.get(after[0]) if after else None  # <|im_end|> is an added token
    return after[0] if added is not None and added.special else eos
