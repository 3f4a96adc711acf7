"""One optimizer step on a round's groups: the node's own fresh groups plus its peers'.

For each micro-batch of whole groups: one forward pass gives ``logprobs`` (with gradient) at the
samplers' temperatures; ``old_logprobs`` are the same values detached — the node takes exactly one
optimizer step per round, so π_θold is the model before this step, which is the model of this
forward pass. The chosen loss variant's value is weighted by the micro-batch's share of the
completions and back-propagated; then gradients are clipped and AdamW steps once, and the policy
version increases. Zero-variance groups are dropped before any forward pass (they teach nothing); in
horizontal mode that is decided per advantage group, over every node's completions for the prompt.

A step whose loss or gradient norm is not finite is refused: no optimizer step, the weights, the
optimizer's moments and the policy version untouched, ``StepMetrics.refused`` set. The loss bounds every
ratio (``loss/terms.py``), so only a defect or a hostile input gets here; the refused step then re-runs each
peer's groups alone and names the peers whose groups alone are not finite (``nonfinite_peers``), for the
node to charge them.
"""

import math
import time
from collections import defaultdict
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ftis.node.config import LossConfig, TrainerConfig
from ftis.node.loss import LossInputs, compute_loss
from ftis.node.trainer.groups import TrainingGroup, advantage_groups, rewards_vary
from ftis.node.trainer.logprobs import completion_logprobs
from ftis.node.trainer.packing import micro_batches, pack


@dataclass(frozen=True)
class PeerFiltered:
    """One generator's off-policy completions a step judged (with at least one token, in groups with reward
    variance), and how many of them the filter dropped for divergence (D > g): evidence for its score."""

    completions: int
    divergence_filtered: int


@dataclass(frozen=True)
class StepMetrics:
    trained: bool  # False when no group had reward variance: no optimizer step was taken
    policy_version: int  # after the step
    loss: float
    grad_norm: float
    groups: int  # informative advantage groups trained on (one per group in vertical mode)
    peer_groups: int  # off-policy groups among them (parts of one advantage group in horizontal mode)
    zero_variance_groups: int
    sequences: int
    tokens: int  # completion tokens trained on
    filtered_fraction: float
    filtered_advantage_fraction: float
    filtered_divergence_fraction: float
    is_weight_mean: float
    is_weight_max: float
    truncated_fraction: float
    divergence_mean: float
    seconds: float
    filtered_by_peer: dict[str, PeerFiltered] = field(default_factory=dict)  # by the groups' peer_id
    refused: bool = False  # the loss or the gradient norm was not finite: no optimizer step was taken
    nonfinite_peers: list[str] = field(default_factory=list)  # ...peers whose groups alone were not finite

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


class Trainer:
    def __init__(self, model: torch.nn.Module, adapter: str, loss: LossConfig, config: TrainerConfig,
                 policy_version: int = 0, pad_id: int = 0):
        self.model, self._loss, self._config, self._pad_id = model, loss, config, pad_id
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        if not self.parameters:
            raise ValueError("the model has no trainable parameters")
        self._lr = config.lr_for(adapter)
        self.optimizer = torch.optim.AdamW(self.parameters, lr=self._lr, weight_decay=config.weight_decay)
        self.policy_version = policy_version
        # Optimizer steps begun in this process, counted *before* each one starts: a checkpoint compares
        # it with its snapshot to know the weights were not touched since (a signal can land mid-step).
        self.steps_started = 0

    def state_dict(self) -> dict[str, object]:
        """What a resumed trainer needs besides the model's weights: the optimizer state and the policy version."""
        return {"optimizer": self.optimizer.state_dict(), "policy_version": self.policy_version}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:  # the moments are the checkpoint's; the settings this config's
            group["lr"], group["weight_decay"] = self._lr, self._config.weight_decay
        self.policy_version = int(state["policy_version"])

    def step(self, groups: list[TrainingGroup]) -> StepMetrics:
        started = time.perf_counter()
        gathered = advantage_groups(groups)
        kept = [together for together in gathered if rewards_vary(together)]
        informative = [group for together in kept for group in together]
        skipped = len(gathered) - len(kept)
        total = sum(group.size for group in informative)
        if not informative:
            return _idle(self.policy_version, skipped, time.perf_counter() - started)
        params = self._loss.params(step=self.policy_version)
        self.model.train()
        sums = self._backward(informative, params)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters, self._config.max_grad_norm)
        if not (math.isfinite(sums.loss) and math.isfinite(float(grad_norm))):
            culprits = self._nonfinite_peers(kept, params)
            self.optimizer.zero_grad(set_to_none=True)
            return _idle(self.policy_version, skipped, time.perf_counter() - started, refused=True,
                         nonfinite_peers=culprits)
        self.steps_started += 1
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.policy_version += 1
        return sums.metrics(
            policy_version=self.policy_version,
            grad_norm=float(grad_norm),
            groups=len(kept),
            peer_groups=sum(group.off_policy for group in informative),
            zero_variance_groups=skipped,
            sequences=total,
            seconds=time.perf_counter() - started,
        )


    def _backward(self, groups: list[TrainingGroup], params) -> "_Sums":
        """Gradients of the loss over ``groups`` (whole advantage groups) in the parameters' ``.grad``."""
        self.optimizer.zero_grad(set_to_none=True)
        total = sum(group.size for group in groups)
        sums = _Sums()
        for chunk in micro_batches(groups, self._config.max_tokens_per_microbatch):
            packed = pack(chunk, self._pad_id)
            logprobs = completion_logprobs(self.model, packed)
            inputs = LossInputs(
                logprobs=logprobs,
                old_logprobs=logprobs.detach(),
                sampler_logprobs=packed.sampler_logprobs,
                loss_mask=packed.loss_mask,
                rewards=packed.rewards,
                group_ids=packed.group_index,
                off_policy=packed.off_policy,
            )
            out = compute_loss(self._loss.variant, inputs, params)
            share = float(out.metrics.num_sequences) / total
            (out.loss * share).backward()
            sums.add(out, packed, share)
            sums.add_peers(chunk, out.divergence_filtered)
        return sums

    def _nonfinite_peers(self, kept: list[list[TrainingGroup]], params) -> list[str]:
        """The peers whose advantage groups, trained on alone, give a loss or a gradient that is not finite
        (an advantage group mixing generators, in horizontal mode, is nobody's alone)."""
        by_peer: dict[str, list[TrainingGroup]] = defaultdict(list)
        for together in kept:
            generators = {group.peer_id for group in together}
            if len(generators) == 1 and all(group.off_policy for group in together):
                by_peer[together[0].peer_id] += together
        culprits = []
        for peer, groups in sorted(by_peer.items()):
            sums = self._backward(groups, params)
            gradients = [p.grad for p in self.parameters if p.grad is not None]
            if not math.isfinite(sums.loss) or not all(bool(torch.isfinite(g).all()) for g in gradients):
                culprits.append(peer)
        return culprits


class _Sums:
    """Metrics of the micro-batches, combined with the weights that make them whole-step figures."""

    def __init__(self) -> None:
        self.loss = self.filtered = self.by_advantage = self.by_divergence = 0.0
        self.weight_sum = self.truncated = self.divergence = 0.0
        self.weight_max = 0.0
        self.tokens = self.off_policy = 0
        self.by_peer: dict[str, PeerFiltered] = {}

    def add(self, out, packed, share: float) -> None:
        m = out.metrics
        tokens = int(packed.loss_mask.sum())
        off_policy = int(packed.off_policy.sum())
        self.loss += float(out.loss.detach()) * share
        self.filtered += float(m.filtered_fraction) * share
        self.by_advantage += float(m.filtered_advantage_fraction) * share
        self.by_divergence += float(m.filtered_divergence_fraction) * share
        self.weight_sum += float(m.is_weight_mean) * tokens
        self.weight_max = max(self.weight_max, float(m.is_weight_max))
        self.truncated += float(m.truncated_fraction) * tokens
        self.divergence += float(m.divergence_mean) * off_policy
        self.tokens += tokens
        self.off_policy += off_policy

    def add_peers(self, chunk: list[TrainingGroup], divergence_filtered: Tensor) -> None:
        """Count the off-policy groups' judged and divergence-filtered completions by peer; ``pack`` lays out
        the chunk's rows group after group, each group's completions in order."""
        dropped = divergence_filtered.tolist()  # (B,)
        start = 0
        for group in chunk:
            rows = dropped[start : start + group.size]
            start += group.size
            if group.off_policy:
                before = self.by_peer.get(group.peer_id, PeerFiltered(0, 0))
                self.by_peer[group.peer_id] = PeerFiltered(
                    before.completions + int((group.completions.lengths > 0).sum()),
                    before.divergence_filtered + sum(rows))

    def metrics(self, **fields: object) -> StepMetrics:
        return StepMetrics(
            trained=True,
            filtered_by_peer=self.by_peer,
            loss=self.loss,
            tokens=self.tokens,
            filtered_fraction=self.filtered,
            filtered_advantage_fraction=self.by_advantage,
            filtered_divergence_fraction=self.by_divergence,
            is_weight_mean=self.weight_sum / max(self.tokens, 1),
            is_weight_max=self.weight_max,
            truncated_fraction=self.truncated / max(self.tokens, 1),
            divergence_mean=self.divergence / max(self.off_policy, 1),
            **fields,
        )


def _idle(policy_version: int, skipped: int, seconds: float, refused: bool = False,
          nonfinite_peers: list[str] | None = None) -> StepMetrics:
    return StepMetrics(
        trained=False, policy_version=policy_version, loss=0.0, grad_norm=0.0, groups=0, peer_groups=0,
        zero_variance_groups=skipped, sequences=0, tokens=0, filtered_fraction=0.0,
        filtered_advantage_fraction=0.0, filtered_divergence_fraction=0.0, is_weight_mean=0.0,
        is_weight_max=0.0, truncated_fraction=0.0, divergence_mean=0.0, seconds=seconds, refused=refused,
        nonfinite_peers=list(nonfinite_peers or []),
    )
