"""A peer's group made trainable here when its generator used another tokenizer (docs/loss.md): its token ids
mean nothing to this node, so the group is rebuilt from what both sides share.

- The prompt: this node renders the problem the group names, from its own copy of the task, as it renders its
  own prompts (the generator's prompt ids are not read).
- The completions: each completion's text (protocol v3 carries it), tokenized by this node's tokenizer, plus
  this node's end-of-sequence token where the generator stopped on its own (finish "stop"): the generator's
  log-prob includes the end it sampled, so π_θ(y) includes this node's.
- The generator's log π_gen(y): its sampler log-probs summed over its own tokens (``TrainingGroup.sampler_sums``
  of the wire group), one number per completion, which the per-sequence loss compares with this node's.

A text a peer sends is as much its claim as its log-probs are: the loss bounds what either can do (docs/loss.md).
What a text costs this node is bounded here: a completion of more than ``max_tokens`` tokens once tokenized here
makes its group unusable, so a peer cannot make this node train on more than that many tokens per completion.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ftis.node.tasks import Problem, Task
from ftis.node.tasks.prompts import prompt_ids
from ftis.protocol.schema import CompletionColumns, Group

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# A completion's tokens here, at most, for each token this node would sample itself (generation.max_new_tokens):
# the same text is at most a few times longer in one tokenizer than in another (a character tokenizer against a
# 150k-token BPE: ~4x on English and arithmetic), so 4x keeps every honest completion and bounds a peer's cost.
RETOKENIZED_PER_TOKEN = 4


@dataclass(frozen=True)
class Retokenizer:
    """How this node turns another tokenizer's group into its own tokens."""

    tokenizer: "PreTrainedTokenizerBase"
    chat: bool  # prompts wrapped in the chat template, as this node's own are
    max_tokens: int  # this node's tokens one completion may have

    @classmethod
    def for_node(cls, tokenizer: "PreTrainedTokenizerBase", chat: bool, max_new_tokens: int) -> "Retokenizer":
        return cls(tokenizer, chat, RETOKENIZED_PER_TOKEN * max_new_tokens)

    def prompt(self, task: Task, problem: Problem) -> np.ndarray:
        return prompt_ids(self.tokenizer, task.prompt(problem), chat=self.chat)

    def completions(self, group: Group, rewards: np.ndarray) -> CompletionColumns | None:
        """The group's completions as this node's tokens of their texts, with ``rewards``; None when a completion
        is empty here or longer than ``max_tokens`` (the group is unusable)."""
        columns = group.columns
        texts = columns.texts
        assert texts is not None, "a group without texts cannot be tokenized here"
        eos = self.tokenizer.eos_token_id
        encoded = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        rows = [[*ids, eos] if finish == "stop" and eos is not None else list(ids)
                for ids, finish in zip(encoded, columns.finish_reasons, strict=True)]
        lengths = np.array([len(row) for row in rows], np.int64)
        if lengths.min() < 1 or lengths.max() > self.max_tokens:
            return None
        ids = np.concatenate([np.asarray(row, np.int64) for row in rows])
        return CompletionColumns(
            token_ids=ids,
            sampler_logprobs=np.zeros(len(ids), np.float32),  # none per token: sequence_logprobs holds the claim
            lengths=lengths,
            rewards=np.asarray(rewards, np.float64),
            finish_reasons=columns.finish_reasons,
            texts=texts,
        )
