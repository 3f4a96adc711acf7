"""The transformers generation backend: an explicit sampling loop over a loaded causal LM with a KV cache.

    gen = TransformersGenerator(model, eos_token_ids=tokenizer.eos_token_id, batch_size=64)
    groups = gen.generate(prompts, num_completions=8, sampling=SamplingSettings(1.0, 1.0, 0, 256), seed=step)

Why a loop of our own rather than ``model.generate``: the sampler log-probs are the point of this
file, and here they are, in one place, exactly what the token was drawn from:
``draws.processed_logprobs`` (logits / T, then top-k, then top-p, renormalised) feeds both the draw and the
recorded log-prob: π_gen, the distribution the token was drawn from. The trainer's π_θ is the model at
the temperature alone (``trainer/logprobs.py``): the policy being trained is the whole distribution. With
top-k and top-p off they are the same function; with either on, the sampler draws from a truncation of
π_θ, so even a node's own fresh samples are off-policy by that much and their IS weight π_θold / π_gen
falls below 1 (measured on a tiny model: a mean of ~0.90 at top-p 0.9, ~0.08 at top-k 5). The node says
so when it starts (``runner/join.py``).

Shape of the loop: all prompts × G, prompt-major, in chunks of ``batch_size`` sequences; each chunk is
left-padded (so every row's next token sits in the last column), prefilled once, then decoded one
token per step for every row until each has sampled an end-of-sequence token, completed a stop string
(``stops.py``) or reached ``max_new_tokens``. A finished row keeps being fed padding (cheaper than reshaping the
cache) and its later tokens are never returned. Positions are counted from each row's first real token, so a
padded row sees the same positions it would alone. The prefill runs each distinct prompt once, not once per
completion (a group's G copies share it), and the instruction and solved examples every problem's prompt starts
with once for all of them, which with a few-shot prompt is nearly all of it (``_prefill``).

Deterministic for a given seed, prompts, settings, ``batch_size`` and device: the draws come from one
``torch.Generator`` consumed chunk by chunk.

``greedy`` is the evaluation helper (argmax decoding, same loop); it is not a sampler, and its
completions are not meant for training.
"""

import inspect
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor, nn
from transformers import DynamicCache

from ftis.node.generation.draws import Pick, greedy_pick, sampling_pick
from ftis.node.generation.stops import StopStrings
from ftis.node.generation.types import GeneratedCompletion, check_request, stop_token_ids
from ftis.node.prompt_prefix import shared_prefix
from ftis.protocol import SamplingSettings

if TYPE_CHECKING:
    from ftis.node.generation.sampler_copy import SamplerCopy


class _Forward:
    """One forward step of a causal LM (or a peft model around one), across transformers versions: the
    cache argument is ``cache`` from 5.x (``past_key_values`` before), the last-position-logits argument
    ``logits_to_keep`` (``num_logits_to_keep`` before 4.50). Returns the last position's logits only,
    so a prefill never materialises (B, P, V) logits."""

    def __init__(self, model: nn.Module):
        self.model = model
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        params = inspect.signature(base.forward).parameters
        self.cache_arg = "cache" if "cache" in params else "past_key_values"
        self.keep_arg = next((name for name in ("logits_to_keep", "num_logits_to_keep") if name in params), None)

    def new_cache(self) -> DynamicCache:
        try:
            return DynamicCache(config=getattr(self.model, "config", None))  # the config knows sliding-window layers
        except TypeError:  # transformers < 4.56 takes no config
            return DynamicCache()

    def __call__(self, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor, cache: DynamicCache) -> Tensor:
        kwargs = {self.cache_arg: cache}
        if self.keep_arg == "logits_to_keep":
            # an index, not a count: the model then gathers the last position into a contiguous tensor, where a count
            # slices it strided, which made the output layer's product ~10x slower on CPU (Gemma 3, 64 rows: 4.1 s)
            kwargs[self.keep_arg] = torch.tensor([input_ids.shape[1] - 1], device=input_ids.device)
        elif self.keep_arg is not None:
            kwargs[self.keep_arg] = 1
        out = self.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True, **kwargs
        )
        return out.logits[:, -1, :].float()  # (B, V)


def _left_pad(prompts: Sequence[np.ndarray], pad_token_id: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """(ids, attention mask), both (B, P) with P the longest prompt; padding on the left."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.as_tensor(np.asarray(prompt, dtype=np.int64))
        mask[row, width - len(prompt) :] = 1
    return ids.to(device), mask.to(device)


def _decode_chunk(
    forward: _Forward,
    prompts: Sequence[np.ndarray],
    max_new_tokens: int,
    eos_ids: Tensor,
    pad_token_id: int,
    pick: Pick,
    stop: StopStrings | None = None,
) -> list[GeneratedCompletion]:
    device = eos_ids.device
    logits, mask, positions, cache = _prefill(forward, prompts, pad_token_id, device, max_new_tokens)

    B = len(prompts)
    tokens = torch.full((B, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    logprobs = torch.zeros((B, max_new_tokens), dtype=torch.float32, device=device)
    lengths = torch.full((B,), max_new_tokens, dtype=torch.long, device=device)
    stopped = torch.zeros(B, dtype=torch.bool, device=device)  # sampled an end-of-sequence token or a stop string
    for t in range(max_new_tokens):
        next_ids, next_logprobs = pick(logits)  # (B,), (B,)
        next_ids = next_ids.masked_fill(stopped, pad_token_id)  # finished rows are fed padding, never kept
        tokens[:, t] = next_ids
        logprobs[:, t] = next_logprobs
        just_stopped = ~stopped & torch.isin(next_ids, eos_ids)
        if stop is not None:
            just_stopped |= _stop_strings_ended(stop, tokens, t, ~stopped & ~just_stopped)
        lengths = torch.where(just_stopped, t + 1, lengths)
        stopped |= just_stopped
        if t + 1 == max_new_tokens or bool(stopped.all()):  # one host sync per token: the early exit pays
            break
        mask = torch.cat([mask, mask.new_ones((B, 1))], dim=-1)  # (B, P + t + 1)
        positions = positions[:, -1:] + 1  # (B, 1): the last column is every row's last real token
        logits = forward(next_ids[:, None], mask, positions, cache)

    tokens_np, logprobs_np = tokens.cpu().numpy(), logprobs.cpu().numpy()
    lengths_np, stopped_np = lengths.cpu().numpy(), stopped.cpu().numpy()
    return [
        GeneratedCompletion(
            token_ids=tokens_np[row, :n].copy(),
            sampler_logprobs=logprobs_np[row, :n].copy(),
            finish_reason="stop" if stopped_np[row] else "length",
        )
        for row, n in enumerate(lengths_np.tolist())
    ]


def _prefill(forward: _Forward, prompts: Sequence[np.ndarray], pad_token_id: int, device: torch.device,
             max_new_tokens: int) -> tuple[Tensor, Tensor, Tensor, DynamicCache]:
    """The prompts through the model: the last position's logits (B, V), the attention mask (B, L) and the
    positions (B, ·) the decoding continues from, and the filled cache.

    Each distinct prompt goes through once (a group's G copies are one row of the prefill), and its cache, logits,
    mask and positions are copied to each of its rows. The tokens every distinct prompt starts with (an
    instruction and its solved examples, shared by every problem) go through once before them, and the cache of
    that prefix is copied to every distinct prompt; then each one's own tokens follow, left-padded after the
    prefix (padding is masked, and positions count real tokens only, so each row sees the positions it would
    alone). A sliding window counts cache slots, padding included: a model whose window is shorter than the
    longest prompt and its completion prefills each prompt whole, as the trainer does (``trainer/logprobs.py``)."""
    distinct, rows = _distinct(prompts)
    shared = shared_prefix(distinct)
    window = getattr(getattr(forward.model, "config", None), "sliding_window", None)
    if shared and window is not None and max(len(prompt) for prompt in distinct) + max_new_tokens > window:
        shared = 0
    cache = forward.new_cache()
    if not shared:
        ids, mask = _left_pad(distinct, pad_token_id, device)  # (U, P)
        positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)  # (U, P): 0 at each row's first real token
    else:
        head = torch.as_tensor(np.asarray(distinct[0][:shared], dtype=np.int64), device=device)[None]  # (1, S)
        forward(head, torch.ones_like(head), torch.arange(shared, device=device)[None], cache)
        cache.batch_repeat_interleave(len(distinct))
        ids, tail_mask = _left_pad([prompt[shared:] for prompt in distinct], pad_token_id, device)  # (U, T)
        mask = torch.cat([tail_mask.new_ones((len(distinct), shared)), tail_mask], dim=-1)  # (U, S + T)
        positions = (mask.cumsum(dim=-1) - 1)[:, shared:]  # (U, T): the tails continue from position S
    logits = forward(ids, mask, positions, cache)  # (U, V)
    if len(distinct) == len(prompts):
        return logits, mask, positions, cache
    index = torch.as_tensor(rows, device=device)  # (B,) each row's distinct prompt
    cache.batch_select_indices(index)
    return logits[index], mask[index], positions[index], cache


def _distinct(prompts: Sequence[np.ndarray]) -> tuple[list[np.ndarray], list[int]]:
    """The distinct prompts in order of first appearance, and for each prompt the index of its distinct one."""
    first: dict[bytes, int] = {}
    distinct: list[np.ndarray] = []
    rows: list[int] = []
    for prompt in prompts:
        key = np.asarray(prompt, dtype=np.int64).tobytes()
        if key not in first:
            first[key] = len(distinct)
            distinct.append(prompt)
        rows.append(first[key])
    return distinct, rows


def _stop_strings_ended(stop: StopStrings, tokens: Tensor, t: int, active: Tensor) -> Tensor:
    """(B,) bool: the active rows whose text now holds a stop string (``stops.py``'s rule at token ``t``)."""
    ended = torch.zeros_like(active)
    rows = active.nonzero().flatten().tolist()
    if rows:
        windows = tokens[rows, max(0, t + 1 - stop.window) : t + 1].tolist()
        hits = [row for row, hit in zip(rows, stop.ended(windows), strict=True) if hit]
        ended[hits] = True
    return ended


@contextmanager
def _generating(model: nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) and inference mode for the duration; every module's training flag is put
    back afterwards, so a trainer that froze some submodules' mode finds them as it left them."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        with torch.inference_mode():
            yield
    finally:
        for module, training in modes:
            module.training = training


def _model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def _resolve_special_ids(
    model: nn.Module, eos_token_ids: int | Sequence[int] | None, pad_token_id: int | None
) -> tuple[list[int], int]:
    """End-of-sequence ids — those given plus the model's generation config's and config's, as the vLLM
    backend stops at (``types.stop_token_ids``; several are common: Qwen's chat models stop at two) — and the
    padding id, from the argument or else the configs. Padding defaults to the first given end-of-sequence
    id: padded positions are masked, so any id serves."""
    configs = [getattr(model, "generation_config", None), getattr(model, "config", None)]
    if eos_token_ids is not None and not isinstance(eos_token_ids, int | np.integer) and not list(eos_token_ids):
        raise ValueError("eos_token_ids is empty")
    given = [] if eos_token_ids is None else [int(eos_token_ids)] if isinstance(eos_token_ids, int | np.integer) \
        else [int(i) for i in eos_token_ids]
    stops = stop_token_ids(model, eos_token_ids)  # ValueError when neither the arguments nor the configs name one
    eos = [*dict.fromkeys(given), *sorted(stops - set(given))]
    if pad_token_id is None:
        pad_token_id = next((c.pad_token_id for c in configs if getattr(c, "pad_token_id", None) is not None), eos[0])
    return eos, int(pad_token_id)


def _decode(
    model: nn.Module,
    prompts: Sequence[np.ndarray],
    max_new_tokens: int,
    eos_token_ids: int | Sequence[int] | None,
    pad_token_id: int | None,
    batch_size: int,
    pick_for: Callable[[torch.device], Pick],
    stop: StopStrings | None = None,
) -> list[GeneratedCompletion]:
    """One completion per prompt, in order, decoded in chunks of ``batch_size``."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be ≥ 1, got {batch_size}")
    eos, pad = _resolve_special_ids(model, eos_token_ids, pad_token_id)
    device = _model_device(model)
    forward = _Forward(model)
    eos_ids = torch.tensor(eos, dtype=torch.long, device=device)
    pick = pick_for(device)
    out: list[GeneratedCompletion] = []
    with _generating(model):
        for start in range(0, len(prompts), batch_size):
            chunk = prompts[start : start + batch_size]
            out.extend(_decode_chunk(forward, chunk, max_new_tokens, eos_ids, pad, pick, stop))
    return out


class TransformersGenerator:
    """The ``Generator`` over a transformers causal LM (full or peft-wrapped), on whatever device it
    sits. With ``weights = "float32"`` the model is used in place: the trainer's weights are the ones it samples,
    and ``sync_weights`` after a step only records their version. With ``"bfloat16"`` or ``"int8"`` it samples a
    copy in those bits (``sampler_copy.py``), brought to the trainer's weights by ``sync_weights`` when the version
    moved."""

    def __init__(
        self,
        model: nn.Module,
        eos_token_ids: int | Sequence[int] | None = None,
        pad_token_id: int | None = None,
        batch_size: int = 64,
        policy_version: int = 0,
        stop: StopStrings | None = None,
        weights: str = "float32",
    ):
        self.model = model
        self.eos_token_ids = eos_token_ids
        self.pad_token_id = pad_token_id
        self.batch_size = batch_size  # sequences per forward pass (prompts × G are split into chunks)
        self.stop = stop  # stop strings besides the end-of-sequence ids (``stops.py``)
        self.weights = weights
        self._policy_version = policy_version
        self._copy = None if weights == "float32" else _sampler_copy(model, weights)

    @property
    def sampled(self) -> nn.Module:
        """What ``generate`` samples: the model itself, or its copy in fewer bits."""
        return self.model if self._copy is None else self._copy.model

    @property
    def policy_version(self) -> int:
        return self._policy_version

    def sync_weights(self, policy_version: int) -> None:
        """Record the trainer's version (the model is shared, so it already holds those weights); a copy takes them
        when the version moved (the layers that train, converted again)."""
        moved = int(policy_version) != self._policy_version
        self._policy_version = int(policy_version)
        if moved and self._copy is not None:
            self._copy.refresh()

    def generate(
        self,
        prompts: list[np.ndarray],
        num_completions: int,
        sampling: SamplingSettings,
        seed: int | None = None,
    ) -> list[list[GeneratedCompletion]]:
        check_request(prompts, num_completions, sampling)
        G = num_completions
        rows = [prompt for prompt in prompts for _ in range(G)]  # prompt-major: a prompt's G copies together

        def pick_for(device: torch.device) -> Pick:
            generator = torch.Generator(device=device)
            if seed is None:
                generator.seed()  # a fresh, non-deterministic seed
            else:
                generator.manual_seed(seed)
            return sampling_pick(sampling, generator)

        flat = _decode(self.sampled, rows, sampling.max_new_tokens, self.eos_token_ids, self.pad_token_id,
                       self.batch_size, pick_for, self.stop)
        return [flat[i * G : (i + 1) * G] for i in range(len(prompts))]


def _sampler_copy(model: nn.Module, weights: str) -> "SamplerCopy":
    from ftis.node.generation.sampler_copy import SamplerCopy  # torch's quantization modules load only when asked for

    return SamplerCopy(model, weights)


def greedy(
    model: nn.Module,
    prompts: list[np.ndarray],
    max_new_tokens: int,
    *,
    eos_token_ids: int | Sequence[int] | None = None,
    pad_token_id: int | None = None,
    batch_size: int = 64,
    stop: StopStrings | None = None,
) -> list[GeneratedCompletion]:
    """Argmax decoding for evaluation: one completion per prompt, stopping at an end-of-sequence token
    or a stop string (kept, "stop") or after ``max_new_tokens`` ("length"). ``sampler_logprobs`` are 0 — the log-prob of
    the argmax under greedy decoding — not the model's log-probs: do not train on these."""
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be ≥ 1, got {max_new_tokens}")
    for i, prompt in enumerate(prompts):
        if np.asarray(prompt).ndim != 1 or len(prompt) == 0:
            raise ValueError(f"prompts[{i}] must be a non-empty 1-D array of token ids")
    return _decode(model, prompts, max_new_tokens, eos_token_ids, pad_token_id, batch_size, lambda _: greedy_pick,
                   stop)
