"""Per-token log-probs of completion tokens under a model, at a given sampling temperature.

    logprobs = completion_logprobs(model, pack(groups))  # (B, T), with gradient

The value: log π_θ(token_j | prompt, tokens_<j) with logits / temperature (the sampler's), and no top-k or
top-p: the policy trained is the whole distribution (``generation/hf.py`` says what that means for the IS
weight when the sampler truncates it). Padded positions hold 0: the loss masks them.

The memory, which the vocabulary sets (a position's float32 logits are 0.2 MB for 49,152 entries, 1 MB for
262,144), and which the model's activations set on a few-shot prompt:
1. Logits only where a completion token is predicted: the decoder gives the final normed hidden states, and
   the output layer is applied at the prompt's last position and the completion's positions, never over the
   rest of the prompt.
2. In chunks of at most ``CHUNK_LOGITS`` logits (positions × vocabulary), each chunk's "output layer → chosen
   logit − logsumexp" under ``torch.utils.checkpoint``: no chunk's logits outlive it, forward or backward
   (the backward pass recomputes them a chunk at a time, one more output-layer product per position). The
   temperature divides a chunk's logits in place, and the log-softmax is never materialised.
3. Shared prompts (``packing.py``): the micro-batch's distinct prompts are prefilled once into a KV cache (the
   tokens they all start with, a task's instruction and solved examples, once for all of them: ``_prefill``), its
   rows are repeated for each prompt's completions, and the completions run on it, a bucket of rows of similar
   length at a time (each on its own shallow copy of the cache; transformers' layered caches, 4.56 on: an
   older cache runs every row in one pass); the gradient flows through the cached keys and values into the
   prompt's pass. Prompts are left-padded and positions counted from each row's first real token, as
   generation does, so every real token sees the positions and (in a sliding-window layer) the neighbours it
   has alone: the cache keeps a window's worth of the prompt, which is all a completion token's window can
   reach. Measured on SmolLM2-135M, 4 few-shot prompts × 8 completions, against one row per completion and
   full logits: a step's peak memory 17.3 → 4.0 GiB, the tokens its passes compute 13,968 → 2,847
   (docs/benchmarks.md#the-training-steps-memory-on-real-models).

Which path a model takes: a transformers causal LM, or a peft model around one, whose logits are its output
layer over its decoder's last hidden state, softcapped where ``final_logit_softcapping`` is set (Gemma 2) —
checked once per model against its own forward on a short sequence (``output_layer``). Any other module (a
model whose forward scales its logits in another way, a test's fake) runs the rows layout through its own
forward with its full logits: the same numbers, more memory. A model whose decoder takes no cache argument
does not share prompts (``shares_prompts``), nor does one under transformers' gradient checkpointing, which
drops the cache inside each checkpointed layer (``trainer.py`` chooses).

Devices: the packed batch is on the CPU; the forward pass runs where the model is (a GPU node's), and the
(B, T) result comes back to the CPU, where the loss runs beside the rest of the batch (the gradient follows
the copy back to the model).
"""

import copy
import functools
import inspect
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ftis.node.trainer.packing import PackedBatch

CHUNK_LOGITS = 1 << 24  # logits (positions × vocabulary) alive at once: 64 MB in float32
_PROBE = 8  # tokens of the sequence ``output_layer`` checks a model's head on


@dataclass(frozen=True, eq=False)
class OutputLayer:
    """A causal LM split at its last hidden state: ``decoder`` (ids → final normed hidden states) and
    ``logits`` (hidden states → logits as the model's own forward makes them, in float32 at least)."""

    decoder: nn.Module = field(repr=False)
    output: nn.Module = field(repr=False)  # the output embedding (``lm_head``), LoRA-wrapped where one targets it
    vocab_size: int
    softcap: float | None  # config.final_logit_softcapping
    cache_arg: str | None  # the decoder's cache keyword ("cache" from transformers 5, "past_key_values" before)
    config: Any = field(repr=False)

    def logits(self, hidden: Tensor) -> Tensor:
        with torch.autocast(hidden.device.type, enabled=False):  # the logits' products in the weights' own dtype
            logits = _at_least_float32(self.output(hidden.to(_weight_dtype(self.output))))  # (n, V)
        if self.softcap:
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits


def completion_logprobs(model: nn.Module, batch: PackedBatch, shared_prompts: bool = True) -> Tensor:
    """(B, T) log-probs of ``batch``'s completion tokens under ``model`` (module docstring); ``shared_prompts``:
    each distinct prompt once, where the model allows it (``shares_prompts``)."""
    device = next(model.parameters()).device
    mask = batch.loss_mask.to(device)  # (B, T)
    targets = batch.completion_ids.to(device)[mask]  # (n,)
    temperature = batch.temperature.to(device)[:, None].expand(mask.shape)[mask]  # (n,)
    head = output_layer(model)
    if head is None:
        values = _from_full_logits(model, batch, device, targets, temperature)
    else:
        hidden = _shared_prompt_states(head, batch, device) if shared_prompts and head.cache_arg else \
            _row_states(head, batch, device)  # (n, H)
        values = _chunked(head.logits, True, head.vocab_size, hidden, targets, temperature)
    out = torch.zeros(mask.shape, dtype=values.dtype, device=device).masked_scatter(mask, values)
    return out.cpu()


def shares_prompts(model: nn.Module) -> bool:
    """Whether ``completion_logprobs`` can compute each distinct prompt once for ``model``."""
    head = output_layer(model)
    return head is not None and head.cache_arg is not None


_HEADS: "weakref.WeakKeyDictionary[nn.Module, OutputLayer | None]" = weakref.WeakKeyDictionary()


def output_layer(model: nn.Module) -> OutputLayer | None:
    """``model``'s decoder and output layer, when applying the one to the other gives the model's own logits
    (checked once per model, on a short sequence); None otherwise."""
    if model not in _HEADS:
        head = _split(model)
        _HEADS[model] = head if head is not None and _agrees(model, head) else None
    return _HEADS[model]


def _split(model: Any) -> OutputLayer | None:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft: the wrapped model
    if not (hasattr(base, "get_decoder") and hasattr(base, "get_output_embeddings") and hasattr(base, "config")):
        return None
    decoder, output = base.get_decoder(), base.get_output_embeddings()
    if decoder is None or decoder is base or output is None:
        return None
    config = base.config.get_text_config() if hasattr(base.config, "get_text_config") else base.config
    parameters = inspect.signature(decoder.forward).parameters
    cache_arg = next((name for name in ("cache", "past_key_values") if name in parameters), None)
    vocab_size = getattr(output, "out_features", None) or config.vocab_size
    return OutputLayer(decoder, output, int(vocab_size), getattr(config, "final_logit_softcapping", None),
                       cache_arg, config)


def _agrees(model: nn.Module, head: OutputLayer) -> bool:
    ids = (torch.arange(_PROBE) % head.vocab_size)[None].to(next(model.parameters()).device)  # (1, _PROBE)
    try:
        with _evaluating(model), torch.no_grad():
            expected = model(input_ids=ids, use_cache=False).logits.double()  # (1, _PROBE, V)
            got = head.logits(head.decoder(input_ids=ids, use_cache=False).last_hidden_state).double()
    except (TypeError, AttributeError):  # a forward or an output of another shape: not the split this file knows
        return False
    scale = float(expected.abs().max()) or 1.0
    return got.shape == expected.shape and bool(torch.allclose(got, expected, rtol=1e-3, atol=1e-3 * scale))


@contextmanager
def _evaluating(model: nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) for the duration; every module's training flag is put back afterwards."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def _row_states(head: OutputLayer, batch: PackedBatch, device: torch.device) -> Tensor:
    """(n, H) the hidden states that predict the real completion tokens, one row per completion."""
    states = head.decoder(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device),
                          use_cache=False).last_hidden_state  # (B, L, H)
    rows = torch.arange(states.shape[0], device=device)[:, None]  # (B, 1)
    return states[rows, batch.target_index.to(device)][batch.loss_mask.to(device)]


def _shared_prompt_states(head: OutputLayer, batch: PackedBatch, device: torch.device) -> Tensor:
    """(n, H) the same hidden states as ``_row_states``, each distinct prompt computed once (module docstring)."""
    assert head.cache_arg is not None
    cache = _new_cache(head.config)
    prompts, prompt_mask = _prefill(head, batch, device, cache)  # (Q, ·, H) and what the cache holds (Q, ·)
    lengths = batch.prompt_mask.to(device).sum(dim=-1)  # (Q,) each prompt's real tokens
    mask = batch.loss_mask.to(device)  # (B, T)
    order = torch.full(mask.shape, -1, dtype=torch.int64, device=device)
    order[mask] = torch.arange(int(mask.sum()), device=device)  # each real token's place in the (n, H) result
    buckets = batch.buckets if hasattr(cache, "layers") else (torch.arange(mask.shape[0]),)  # see _rows_of
    states, places = [], []
    for rows in (rows.to(device) for rows in buckets):
        width = int(mask[rows].sum(dim=-1).max())  # the bucket's longest completion
        if width == 0:
            continue
        index = batch.prompt_index.to(device)[rows]  # (b,)
        bucket = prompts[index, -1][:, None]  # (b, 1, H): the prompt's last position predicts completion token 0
        if width > 1:  # the completion's tokens but its last predict the rest
            ids = batch.completion_ids.to(device)[rows, : width - 1]  # (b, w - 1)
            seen = torch.cat([prompt_mask[index], mask[rows, : width - 1].to(prompt_mask.dtype)], dim=-1)
            positions = lengths[index, None] + torch.arange(width - 1, device=device)  # (b, w - 1)
            completions = head.decoder(input_ids=ids, attention_mask=seen, position_ids=positions, use_cache=True,
                                       **{head.cache_arg: _rows_of(cache, index, len(buckets) > 1)}).last_hidden_state
            bucket = torch.cat([bucket, completions], dim=1)  # (b, w, H)
        kept = mask[rows, :width]  # (b, w)
        states.append(bucket[kept])
        places.append(order[rows, :width][kept])
    if not states:
        return prompts.new_zeros((0, prompts.shape[-1])) + prompts.sum() * 0  # nothing to predict, still a graph
    return torch.cat(states)[torch.argsort(torch.cat(places))]


def _prefill(head: OutputLayer, batch: PackedBatch, device: torch.device, cache: Any) -> tuple[Tensor, Tensor]:
    """The distinct prompts through the decoder into ``cache``: their hidden states (Q, ·, H), whose last column
    is each prompt's last token, and the attention mask (Q, ·) of what the cache holds for each.

    Prompts are left-padded, positions counted from each row's first real token. The tokens they all start with
    (``batch.prompt_prefix``) go through once, and the cache of that prefix is repeated for every prompt; each
    prompt's own tokens follow, left-padded after the prefix. The padding between is masked, which only a
    sliding window would see (it counts cache slots, not positions): a model whose window is shorter than the
    whole sequence prefills each prompt whole."""
    assert head.cache_arg is not None
    cached = {head.cache_arg: cache}
    ids, mask = batch.prompt_ids.to(device), batch.prompt_mask.to(device)  # (Q, P)
    shared = batch.prompt_prefix
    window = getattr(head.config, "sliding_window", None)
    if shared and window is not None and ids.shape[1] + batch.completion_ids.shape[1] > window:
        shared = 0
    if not shared:
        positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)  # (Q, P): 0 at each prompt's first real token
        return head.decoder(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                            **cached).last_hidden_state, mask
    lengths = mask.sum(dim=-1)  # (Q,)
    prefix = ids[0, ids.shape[1] - int(lengths[0]) :][:shared][None]  # (1, S): prompt 0's first tokens
    head.decoder(input_ids=prefix, attention_mask=torch.ones_like(prefix),
                 position_ids=torch.arange(shared, device=device)[None], use_cache=True, **cached)
    cache.batch_repeat_interleave(ids.shape[0])
    own = lengths - shared  # (Q,) each prompt's tokens after the prefix
    width = int(own.max())
    tails = ids[:, ids.shape[1] - width :]  # (Q, w): each row's own tokens right-aligned, some of its prefix before
    tail_mask = (torch.arange(width, device=device)[None] >= (width - own)[:, None]).to(mask.dtype)  # (Q, w)
    seen = torch.cat([tail_mask.new_ones((ids.shape[0], shared)), tail_mask], dim=-1)  # (Q, S + w)
    positions = shared + (tail_mask.cumsum(dim=-1) - 1).clamp(min=0)  # (Q, w): continuing from position S
    return head.decoder(input_ids=tails, attention_mask=seen, position_ids=positions, use_cache=True,
                        **cached).last_hidden_state, seen


def _rows_of(cache: Any, index: Tensor, keep: bool) -> Any:
    """The prefill's cache with row i holding prompt ``index[i]``; ``keep``: leave ``cache`` as it is for the next
    bucket (a completion pass appends to the cache it is given). A shallow copy of each layer, whose tensors the
    selection replaces: transformers' layered caches (4.56 on); an older cache runs one bucket of every row."""
    if keep:
        cache = copy.copy(cache)
        cache.layers = [copy.copy(layer) for layer in cache.layers]
    cache.batch_select_indices(index)
    return cache


def _new_cache(config: Any) -> Any:
    from transformers import DynamicCache

    try:
        return DynamicCache(config=config)  # the config knows sliding-window layers
    except TypeError:  # transformers < 4.56 takes no config
        return DynamicCache()


def _from_full_logits(model: nn.Module, batch: PackedBatch, device: torch.device, targets: Tensor,
                      temperature: Tensor) -> Tensor:
    """(n,) through the model's own forward: its full (B, L, V) logits, read at the completions' positions."""
    logits = model(input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device)).logits
    rows = torch.arange(logits.shape[0], device=device)[:, None]  # (B, 1)
    at_targets = logits[rows, batch.target_index.to(device)][batch.loss_mask.to(device)]  # (n, V)
    return _chunked(_at_least_float32, False, at_targets.shape[-1], at_targets, targets, temperature)


def _weight_dtype(module: nn.Module) -> torch.dtype:
    return next(module.parameters()).dtype


def _at_least_float32(logits: Tensor) -> Tensor:
    """Logits in float32 (a float64 model's in float64): a bf16 log-softmax would cost ~1e-2 of precision."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def _chunked(logits_of: Callable[[Tensor], Tensor], owned: bool, vocab_size: int, hidden: Tensor, targets: Tensor,
             temperature: Tensor) -> Tensor:
    """(n,) ``_chosen_minus_logsumexp`` over ``hidden``'s rows, ``CHUNK_LOGITS // vocab_size`` at a time, each
    recomputed in the backward pass rather than kept."""
    if hidden.shape[0] == 0:
        return hidden.float().sum(dim=-1)  # (0,), still part of the graph
    step = max(1, CHUNK_LOGITS // vocab_size)
    function = functools.partial(_chosen_minus_logsumexp, logits_of, owned)
    parts = [
        checkpoint(function, hidden[i : i + step], targets[i : i + step], temperature[i : i + step],
                   use_reentrant=False) if torch.is_grad_enabled() and hidden.requires_grad
        else function(hidden[i : i + step], targets[i : i + step], temperature[i : i + step])
        for i in range(0, hidden.shape[0], step)
    ]
    return torch.cat(parts)


def _chosen_minus_logsumexp(logits_of: Callable[[Tensor], Tensor], owned: bool, hidden: Tensor, targets: Tensor,
                            temperature: Tensor) -> Tensor:
    """(m,) log softmax(logits / T)[target] for a chunk of m positions. ``owned``: ``logits_of`` returns a fresh
    tensor, which the temperature may divide in place."""
    logits = logits_of(hidden)  # (m, V) float32
    logits = logits.div_(temperature[:, None]) if owned else logits / temperature[:, None]
    chosen = logits.gather(-1, targets[:, None]).squeeze(-1)  # (m,)
    return chosen - torch.logsumexp(logits, dim=-1)
