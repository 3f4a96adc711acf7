"""Supervised examples for the warm start: an arithmetic problem's prompt, and the completion a perfect
model would write for it, in the task's own answer format.

    from ftis.node.warmup.data import ExampleEncoder, demonstration, encode_example, collate
    text = demonstration(task, problem)        # "46" (plain) or "<think> 12+34=46 </think>\\n<answer> 46 </answer>"
    example = encode_example(task, problem, tokenizer)
    examples = ExampleEncoder(task, tokenizer)(problems)   # many: one tokenizer call for prompts, one for targets
    batch = collate([example, ...], pad_id)   # ids, attention mask, loss mask

The prompt is exactly what a node conditions on (the one-turn raw prompt of ``prompts.Prompter``, with the
begin-of-sequence token where the tokenizer adds one: none for the tiny models), and the target is the
demonstration (``task.solved``) followed by the end-of-sequence token, so the model learns to stop where a
node's generator stops. The task's reward gives every demonstration 1 (a test checks each format).
"""

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ftis.node.errors import UserError
from ftis.node.tasks import ArithmeticTask, Problem
from ftis.node.tasks.prompts import Prompter, uses_bos


class WarmupDataError(UserError, ValueError):
    """The tokenizer cannot encode the examples, or has no end-of-sequence token to end them with."""


@dataclass(frozen=True)
class Example:
    prompt_ids: list[int]  # what a node conditions on
    target_ids: list[int]  # the demonstration's ids, then end-of-sequence: the only tokens the loss sees


@dataclass(frozen=True)
class Batch:
    input_ids: Tensor  # (B, T) prompt then target, right-padded
    attention_mask: Tensor  # (B, T) 1 on real tokens
    loss_mask: Tensor  # (B, T-1) 1 where the next token (input_ids[:, 1:]) is a target token


def demonstration(task: ArithmeticTask, problem: Problem) -> str:
    """The completion text a perfect model writes for ``problem`` in ``task``'s answer format."""
    return task.solved(problem)


class ExampleEncoder:
    """Encodes problems of ``task`` into examples for one tokenizer. What depends only on the tokenizer (its
    end-of-sequence token, whether prompts start with its begin-of-sequence token) is settled once here, not per
    example: a warm-up encodes ~10^5 of them."""

    def __init__(self, task: ArithmeticTask, tokenizer) -> None:
        if tokenizer.eos_token_id is None:
            raise WarmupDataError("the tokenizer has no end-of-sequence token, so a target cannot say where to stop")
        self.task, self.tokenizer = task, tokenizer
        self.prompter = Prompter(tokenizer, task, chat=False, bos=uses_bos(tokenizer, "auto"))

    def __call__(self, problems: list[Problem]) -> list[Example]:
        tokenizer = self.tokenizer
        targets = tokenizer([demonstration(self.task, problem) for problem in problems],
                            add_special_tokens=False)["input_ids"]
        examples = []
        for problem, prompt, target_ids in zip(problems, self.prompter.many_ids(problems), targets, strict=True):
            prompt_ids = prompt.tolist()
            if tokenizer.unk_token_id is not None and tokenizer.unk_token_id in prompt_ids + target_ids:
                raise WarmupDataError(f"the tokenizer cannot encode every character of {problem.question!r} and "
                                      "its answer")
            examples.append(Example(prompt_ids, [*target_ids, tokenizer.eos_token_id]))
        return examples


def encode_example(task: ArithmeticTask, problem: Problem, tokenizer) -> Example:
    """One problem's example (``ExampleEncoder`` for many)."""
    return ExampleEncoder(task, tokenizer)([problem])[0]


def collate(examples: list[Example], pad_id: int) -> Batch:
    """Right-padded tensors: with causal attention, padding after a sequence never changes its logits."""
    sequences = [example.prompt_ids + example.target_ids for example in examples]
    width = max(len(sequence) for sequence in sequences)
    input_ids = np.full((len(examples), width), pad_id, dtype=np.int64)  # (B, T)
    attention_mask = np.zeros((len(examples), width), dtype=np.int64)  # (B, T)
    loss_mask = np.zeros((len(examples), width - 1), dtype=np.float32)  # (B, T-1)
    for row, (example, sequence) in enumerate(zip(examples, sequences, strict=True)):
        input_ids[row, : len(sequence)] = sequence
        attention_mask[row, : len(sequence)] = 1
        # logits at position t predict token t+1: the targets start at len(prompt), predicted from len(prompt)-1
        loss_mask[row, len(example.prompt_ids) - 1 : len(sequence) - 1] = 1.0
    return Batch(torch.from_numpy(input_ids), torch.from_numpy(attention_mask), torch.from_numpy(loss_mask))
