"""The trainer's forward passes, counted as ``trainer/packing.py`` bounds them, and whose groups each one held.

A micro-batch's forward pass is the decoder's calls with gradients between the trainer's ``pack`` and the end of its
``completion_logprobs`` (``trainer/logprobs.py``): with shared prompts, its distinct prompts (their common prefix
once), then each bucket of its completions; in the rows layout, one call over every row. ``Passes`` sums each
call's tokens, padding included (``input_ids.numel()``), so a micro-batch's total is what ``padded_tokens`` counts
(the completions' last tokens, which predict nothing, aside) and is checked against
``trainer.max_tokens_per_microbatch``. A pass past it names the peers whose groups it held: the cases that made it.

``counting_passes`` wraps the trainer module's ``pack`` and ``completion_logprobs`` for the duration of a round and
restores them after; the node's own code is not changed. Generation and evaluation run without gradients and are
not counted.
"""

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from ftis.node.trainer import trainer as trainer_module


@dataclass(frozen=True)
class Over:
    tokens: int
    peers: frozenset[str]  # whose groups the pass held


@dataclass
class Passes:
    bound: int
    count: int = 0
    worst: int = 0  # the largest micro-batch's tokens
    over: list[Over] = field(default_factory=list)  # passes past the bound since the round began
    _tokens: int = 0
    _peers: frozenset[str] = frozenset()

    def called(self, module: Any, args: tuple, kwargs: dict) -> None:
        """The decoder's forward pre-hook."""
        if torch.is_grad_enabled():
            ids = kwargs.get("input_ids", args[0] if args else None)
            self._tokens += int(ids.numel())

    def begin(self, peers: frozenset[str]) -> None:
        self._tokens, self._peers = 0, peers

    def end(self) -> None:
        self.count += 1
        self.worst = max(self.worst, self._tokens)
        if self._tokens > self.bound:
            self.over.append(Over(self._tokens, self._peers))


_RECORDERS: "weakref.WeakKeyDictionary[torch.nn.Module, Passes]" = weakref.WeakKeyDictionary()


def record(model: torch.nn.Module, decoder: torch.nn.Module, passes: Passes) -> None:
    """Count ``model``'s trainer passes in ``passes``: its ``decoder`` (the module its forward passes go through)."""
    decoder.register_forward_pre_hook(passes.called, with_kwargs=True)
    _RECORDERS[model] = passes


def forget(model: torch.nn.Module) -> None:
    _RECORDERS.pop(model, None)


@contextmanager
def counting_passes() -> Iterator[None]:
    packing, forward = trainer_module.pack, trainer_module.completion_logprobs
    held: list[frozenset[str]] = [frozenset()]  # the peers of the micro-batch packed last

    def packed(groups: list, *args: Any, **kwargs: Any) -> Any:
        held[0] = frozenset(group.peer_id for group in groups)
        return packing(groups, *args, **kwargs)

    def counted(model: torch.nn.Module, batch: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        passes = _RECORDERS.get(model)
        if passes is not None:
            passes.begin(held[0])
        try:
            return forward(model, batch, *args, **kwargs)
        finally:
            if passes is not None:
                passes.end()

    trainer_module.pack, trainer_module.completion_logprobs = packed, counted
    try:
        yield
    finally:
        trainer_module.pack, trainer_module.completion_logprobs = packing, forward
