"""One optimizer step on a round's groups: the node's own fresh groups plus its peers'.

Each completion's advantage is computed over its whole advantage group first (``_with_advantages``), so that a
group too large for one forward pass can be split across micro-batches. For each micro-batch: one forward pass
gives ``logprobs`` (with gradient) at the samplers' temperatures (each distinct prompt computed once, logits only
where a completion token is predicted: ``logprobs.py``; ``[trainer] max_tokens_per_microbatch`` bounds its tokens,
whatever a group holds, ``packing.py`` counts them);
``old_logprobs`` are the same values detached — the node takes exactly one
optimizer step per round, so π_θold is the model before this step, which is the model of this
forward pass. The chosen loss variant's value is weighted by the micro-batch's share of the
completions and back-propagated; then gradients are clipped and AdamW steps once, and the policy
version increases. Zero-variance groups are dropped before any forward pass (they teach nothing); in
horizontal mode that is decided per advantage group, over every node's completions for the prompt. The
step's figures are ``StepFigures`` (``step_figures.py``, where a metric is added).

A step whose loss or gradient norm is not finite is refused: no optimizer step, the weights, the
optimizer's moments and the policy version untouched, ``StepFigures.refused`` set. The loss bounds every
ratio (``loss/terms.py``), so only a defect or a hostile input gets here; the refused step then re-runs each
peer's groups alone and names the peers whose groups alone are not finite (``nonfinite_peers``), for the
node to charge them. So is a step whose forward or backward pass raises on peers' groups (what the intake admits
should never make it: this is the last line, so that a peer's group is never what ends a node): refused, and the
peers whose groups alone raise are named the same way; an error that no peer's groups alone cause is this node's
own, and is raised.
"""

import math
import time
from collections import defaultdict
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from ftis.node.config import LossConfig, TrainerConfig
from ftis.node.loss import LossInputs, SequenceLossInputs, compute_loss
from ftis.node.loss.advantages import group_advantages
from ftis.node.loss.types import AdvantageNorm
from ftis.node.trainer.groups import TrainingGroup, advantage_groups, rewards_vary
from ftis.node.trainer.logprobs import completion_logprobs, shares_prompts
from ftis.node.trainer.loss_params import loss_params
from ftis.node.trainer.packing import PackedBatch, micro_batches, pack
from ftis.node.trainer.step_figures import LossSums, StepFigures


class Trainer:
    def __init__(self, model: torch.nn.Module, adapter: str, loss: LossConfig, config: TrainerConfig,
                 policy_version: int = 0, pad_id: int = 0):
        self.model, self._loss, self._config, self._pad_id = model, loss, config, pad_id
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        if not self.parameters:
            raise ValueError("the model has no trainable parameters")
        self._lr = config.lr_for(adapter)
        # fused: one kernel over every tensor (SmolLM2-135M on one CPU thread: 0.20 s a step against 0.85 s)
        self.optimizer = torch.optim.AdamW(self.parameters, lr=self._lr, weight_decay=config.weight_decay,
                                           fused=_fusable(self.parameters))
        self.policy_version = policy_version
        if config.gradient_checkpointing:
            _checkpoint_activations(model)
        # Each distinct prompt of a micro-batch computed once, where the model allows it; not under gradient
        # checkpointing, whose checkpointed layers drop the KV cache the completions read their prompt from.
        self._shared_prompts = shares_prompts(model) and not config.gradient_checkpointing
        # Optimizer steps begun in this process, counted *before* each one starts: a checkpoint compares
        # it with its snapshot to know the weights were not touched since (a signal can land mid-step).
        self.steps_started = 0

    def state_dict(self) -> dict[str, Any]:
        """What a resumed trainer needs besides the model's weights: the optimizer state and the policy version."""
        return {"optimizer": self.optimizer.state_dict(), "policy_version": self.policy_version}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:  # the moments are the checkpoint's; the settings this config's
            group["lr"], group["weight_decay"] = self._lr, self._config.weight_decay
        self.policy_version = int(state["policy_version"])

    def step(self, groups: list[TrainingGroup], own_peer_id: str | None = None) -> StepFigures:
        """One optimizer step on ``groups``; ``own_peer_id``: the node's own id, whose groups' mismatch with the
        trainer is measured apart (``StepFigures.own_logprob_gap``)."""
        started = time.perf_counter()
        gathered = advantage_groups(groups)
        kept = [_with_advantages(together, self._loss.advantage_norm)  # the advantage groups trained on
                for together in gathered if rewards_vary(together)]
        informative = [group for together in kept for group in together]
        skipped = len(gathered) - len(kept)
        total = sum(group.size for group in informative)
        if not informative:  # every other figure is zero
            return StepFigures(policy_version=self.policy_version, zero_variance_groups=skipped,
                               seconds=time.perf_counter() - started)
        params = loss_params(self._loss, step=self.policy_version)
        self.model.train()
        try:
            sums = self._backward(kept, params, own_peer_id)
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.parameters, self._config.max_grad_norm))
        except Exception:
            if not any(group.off_policy and group.peer_id for group in informative):
                raise
            culprits = self._nonfinite_peers(kept, params)
            self.optimizer.zero_grad(set_to_none=True)
            if not culprits:
                raise
            return StepFigures(policy_version=self.policy_version, zero_variance_groups=skipped,
                               seconds=time.perf_counter() - started, refused=True, nonfinite_peers=culprits)
        if not (math.isfinite(sums.loss) and math.isfinite(grad_norm)):
            culprits = self._nonfinite_peers(kept, params)
            self.optimizer.zero_grad(set_to_none=True)
            return StepFigures(policy_version=self.policy_version, zero_variance_groups=skipped,
                               seconds=time.perf_counter() - started, refused=True, nonfinite_peers=culprits)
        self.steps_started += 1
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.policy_version += 1
        return StepFigures(
            trained=True,
            policy_version=self.policy_version,
            grad_norm=grad_norm,
            groups=len(kept),
            peer_groups=sum(group.off_policy for group in informative),
            sequence_groups=sum(len(together) for together in kept if any(g.per_sequence for g in together)),
            zero_variance_groups=skipped,
            sequences=total,
            tokens=sums.tokens,
            seconds=time.perf_counter() - started,
            filtered_by_peer=sums.by_peer,
            **sums.figures(),
        )

    def _backward(self, gathered: list[list[TrainingGroup]], params, own_peer_id: str | None = None) -> LossSums:
        """Gradients of the loss over the advantage groups ``gathered`` in the parameters' ``.grad``."""
        self.optimizer.zero_grad(set_to_none=True)
        total = sum(group.size for together in gathered for group in together)
        sums = LossSums()
        for micro in micro_batches(gathered, self._config.max_tokens_per_microbatch, self._shared_prompts):
            packed = pack(micro.groups, self._pad_id)
            with self._products():
                logprobs = completion_logprobs(self.model, packed, self._shared_prompts)
            out = compute_loss(self._loss.variant, _loss_inputs(packed, logprobs, micro.per_sequence), params)
            share = float(out.figures.num_sequences) / total
            (out.loss * share).backward()
            sums.add(out, packed.loss_mask, packed.off_policy, share)
            sums.add_peers(micro.groups, out.divergence_filtered, out.implausible, own_peer_id)
            own = torch.tensor([group.peer_id == own_peer_id and not group.per_sequence
                                for group in micro.groups for _ in range(group.size)], dtype=torch.bool)
            sums.add_own(logprobs, packed.sampler_logprobs, packed.loss_mask, own, packed.off_policy,
                         out.divergence_filtered | out.implausible)
        return sums

    def _products(self) -> AbstractContextManager[Any]:
        """The forward pass's precision: float32, or the decoder's products in bfloat16 (``[trainer] autocast``)."""
        if self._config.autocast == "off":
            return nullcontext()
        return torch.autocast(self.parameters[0].device.type, dtype=torch.bfloat16)

    def _nonfinite_peers(self, kept: list[list[TrainingGroup]], params) -> list[str]:
        """The peers whose advantage groups, trained on alone, give a loss or a gradient that is not finite, or
        raise (an advantage group mixing generators, in horizontal mode, is nobody's alone)."""
        by_peer: dict[str, list[list[TrainingGroup]]] = defaultdict(list)
        for together in kept:
            generators = {group.peer_id for group in together}
            if len(generators) == 1 and all(group.off_policy for group in together):
                by_peer[together[0].peer_id].append(together)
        culprits = []
        for peer, gathered in sorted(by_peer.items()):
            try:
                sums = self._backward(gathered, params)
            except Exception:  # this peer's groups alone break the step
                culprits.append(peer)
                continue
            gradients = [p.grad for p in self.parameters if p.grad is not None]
            if not math.isfinite(sums.loss) or not all(bool(torch.isfinite(g).all()) for g in gradients):
                culprits.append(peer)
        return culprits


def _checkpoint_activations(model: Any) -> None:
    """transformers' per-layer activation checkpointing, non-reentrant (a LoRA model's frozen embeddings then need
    no input gradient); it acts in training mode only, so generation is untouched."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers 5's name
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    elif hasattr(model, "gradient_checkpointing_enable"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    else:
        raise ValueError("gradient_checkpointing = true needs a transformers model")


def _with_advantages(together: list[TrainingGroup], norm: AdvantageNorm) -> list[TrainingGroup]:
    """One advantage group's groups, each with its completions' advantages over all of them (the loss's own
    ``group_advantages``): a micro-batch may then hold only some of its rows."""
    rewards = torch.from_numpy(np.concatenate([group.rewards for group in together]).astype(np.float64))
    advantages = group_advantages(rewards, torch.zeros(len(rewards), dtype=torch.int64), norm).advantages.numpy()
    ends = np.cumsum([group.size for group in together])
    return [replace(group, advantages=advantages[end - group.size : end])
            for group, end in zip(together, ends.tolist(), strict=True)]


def _loss_inputs(packed: PackedBatch, logprobs: torch.Tensor, per_sequence: bool) -> LossInputs | SequenceLossInputs:
    """The loss's inputs for one micro-batch: π_θold is this forward pass's values, detached (one step a round);
    the generator's log-probs per token, or per completion (``per_sequence``); each completion's advantage, over its
    whole advantage group."""
    common: dict[str, Any] = {"logprobs": logprobs, "old_logprobs": logprobs.detach(), "loss_mask": packed.loss_mask,
              "rewards": packed.rewards, "group_ids": packed.group_index, "off_policy": packed.off_policy,
              "advantages": packed.advantages}
    if per_sequence:
        return SequenceLossInputs(sampler_sequence_logprobs=packed.sampler_sequence_logprobs, **common)
    return LossInputs(sampler_logprobs=packed.sampler_logprobs, **common)


def _fusable(parameters: Sequence[torch.Tensor]) -> bool:
    """Whether torch has a fused AdamW for these parameters: floating point, all on one device of a kind it fuses on."""
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

    devices = {parameter.device for parameter in parameters}
    return (len(devices) == 1 and next(iter(devices)).type in _get_fused_kernels_supported_devices()
            and all(parameter.is_floating_point() for parameter in parameters))
