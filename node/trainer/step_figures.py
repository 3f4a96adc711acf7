"""The figures of one optimizer step, declared once: a new per-step training metric is one field of
``StepFigures`` below (a figure of the loss is also computed by the loss, in ``LossFigures``).

From its declaration alone a figure ``x`` becomes:
- ``step.x``, on what ``Trainer.step`` returns (and ``RoundReport.step``);
- the key ``train_x`` of every ``metrics.jsonl`` record (``records/metrics.py``; docs/node.md lists them);
- the TensorBoard scalar ``tag``, when it has one: for steps taken, or for every step with ``every_step``;
- a part of the terminal's summary line and a column of its table when ``shown`` (``records/display.py``);
- its default, zero, on a step not taken (no reward variance, or refused).

How a figure gets its value:
- ``combine`` set: a figure of the loss, ``LossOutputs.loss`` or the ``LossFigures`` field of the same
  name, computed per micro-batch and combined into the step's figure (``LossSums``):
  ``"sequences"`` Σ value × the micro-batch's active completions / the step's completions (the loss's own
  weighting, so a fraction of completions stays one); ``"tokens"`` the mean weighted by the micro-batch's
  completion tokens; ``"off_policy"`` the mean weighted by its off-policy completions; ``"max"`` the largest.
- otherwise ``Trainer.step`` passes it by name (counts, the gradient norm, the time taken).
"""

import math
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from ftis.node.figures import Combine, Figure, declared, figure
from ftis.node.loss import LossOutputs
from ftis.node.trainer.groups import TrainingGroup

RECORD_PREFIX = "train_"  # a figure's key in the flat record: train_<name>
OUTSIDE_LOG_RATIO = math.log(1.25)  # a ratio outside [0.8, 1.25] = [1/1.25, 1.25]: |log ratio| above log 1.25


@dataclass(frozen=True)
class PeerFiltered:
    """One generator's off-policy completions a step judged (with at least one token, in groups with reward
    variance) and how many of them the filter dropped for divergence (D > g); how many had a positive advantage
    (what the step would have taught) and how many of those it dropped as implausible to this node: evidence for
    its score, each share over what it is judged on."""

    completions: int
    divergence_filtered: int
    taught: int
    implausible: int


@dataclass(frozen=True)
class StepFigures:
    """One optimizer step's figures: the table every output of a training figure is made from."""

    trained: bool = figure(False, shown=True)  # False when no step was taken (no reward variance, or refused)
    policy_version: int = figure(0, tag="train/policy_version", every_step=True, shown=True)  # after the step
    loss: float = figure(combine="sequences", tag="train/loss", shown=True)
    grad_norm: float = figure(tag="train/grad_norm")  # before clipping
    # informative advantage groups trained on (one per group in vertical mode)
    groups: int = figure(0, tag="groups/trained", every_step=True)
    # off-policy groups among them (parts of one advantage group in horizontal mode)
    peer_groups: int = figure(0)
    zero_variance_groups: int = figure(0, tag="groups/zero_variance", every_step=True)  # skipped: equal rewards
    # ...of the groups trained on, those trained per sequence: another tokenizer's and the rest of their advantage
    # groups, and under [loss] same_tokenizer_weights = "sequence" every peer's
    sequence_groups: int = figure(0, tag="groups/per_sequence")
    sequences: int = figure(0, tag="train/sequences")  # completions in the informative groups
    tokens: int = figure(0, tag="train/tokens", shown=True, unit="count")  # completion tokens trained on
    # completions dropped by the filter, and dropped with Â ≤ 0 / with D > g (fractions of the active ones)
    filtered_fraction: float = figure(combine="sequences", tag="filter/fraction", shown=True, unit="fraction")
    filtered_advantage_fraction: float = figure(combine="sequences", tag="filter/advantage_fraction", shown=True,
                                                unit="fraction")
    filtered_divergence_fraction: float = figure(combine="sequences", tag="filter/divergence_fraction", shown=True,
                                                 unit="fraction")
    # ...dropped as implausible to this node: a run of its tokens more surprising than [loss] max_surprise
    filtered_implausible_fraction: float = figure(combine="sequences", tag="filter/implausible_fraction",
                                                  unit="fraction")
    # the IS weight the variant applies (loss/variants.py): its mean over tokens, and its largest value
    is_weight_mean: float = figure(combine="tokens", tag="is/weight_mean", shown=True)
    is_weight_max: float = figure(combine="max", tag="is/weight_max", shown=True)
    # tokens whose weight exp(old - sampler) exceeded C
    truncated_fraction: float = figure(combine="tokens", tag="is/truncated_fraction", shown=True, unit="fraction")
    divergence_mean: float = figure(combine="off_policy", tag="divergence/mean", shown=True)  # mean D_i, off-policy
    # this node's own samples against the model they train (the trainer's log-probs before the step): the mean
    # |log π_θ − log π_sample| over their tokens, and the share of tokens whose ratio is outside [0.8, 1.25]. Zero with
    # float32 sampling and no top-k / top-p; a sampler copy in fewer bits ([generation] weights) shows here.
    own_logprob_gap: float = figure(tag="mismatch/own_logprob_gap")
    own_ratio_outside: float = figure(tag="mismatch/own_ratio_outside", unit="fraction")
    # ...and of its own completions the filter judged (all of them with [loss] filter_local, else none), the share
    # it dropped as divergent or implausible: apart from the peers' (``filtered_by_peer``)
    own_filtered_fraction: float = figure(tag="filter/own_fraction", unit="fraction")
    seconds: float = figure()  # wall time of the step
    # by the groups' peer_id: evidence for the peers' scores (swarm/peers/reputation.py)
    filtered_by_peer: dict[str, PeerFiltered] = figure(factory=dict)
    # loss or gradient not finite, or the pass raised on peers' groups
    refused: bool = figure(False, tag="train/refused", every_step=True, shown=True)
    # ...the peers whose groups alone were not finite, or raised
    nonfinite_peers: list[str] = figure(factory=list, shown=True)
    # tokens / seconds, made here from those two (not passed)
    tokens_per_s: float = figure(init=False, tag="throughput/train_tokens_per_s", every_step=True, shown=True)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tokens_per_s", self.tokens / self.seconds if self.seconds > 0 else 0.0)


FIGURES: dict[str, Figure] = declared(StepFigures)


def record_key(name: str) -> str:
    """The key of the figure ``name`` in ``metrics.jsonl``."""
    return RECORD_PREFIX + name


class LossSums:
    """The loss figures of a step's micro-batches, combined as ``StepFigures`` declares, and each peer's
    filtered completions. ``figures()`` gives them by name, ready for ``StepFigures``."""

    def __init__(self) -> None:
        self._combine: dict[str, Combine] = {name: f.combine for name, f in FIGURES.items() if f.combine is not None}
        self._values = dict.fromkeys(self._combine, 0.0)
        self._weights = {"tokens": 0, "off_policy": 0}  # the step's, for the weighted means
        self.by_peer: dict[str, PeerFiltered] = {}
        self._own = {"tokens": 0, "gap": 0.0, "outside": 0, "judged": 0, "filtered": 0}

    @property
    def loss(self) -> float:
        return self._values["loss"]

    @property
    def tokens(self) -> int:
        """Completion tokens of the micro-batches added."""
        return self._weights["tokens"]

    def add(self, out: LossOutputs, loss_mask: Tensor, off_policy: Tensor, share: float) -> None:
        """One micro-batch: its loss outputs, its (B, T) ``loss_mask`` and (B,) ``off_policy`` flags, and
        ``share``, its active completions over the step's completions (its weight in the step's loss)."""
        tokens, off_policy_rows = int(loss_mask.sum()), int(off_policy.sum())
        weights = {"sequences": share, "tokens": float(tokens), "off_policy": float(off_policy_rows)}
        for name, how in self._combine.items():
            value = float(out.loss.detach() if name == "loss" else getattr(out.figures, name))
            if how == "max":
                self._values[name] = max(self._values[name], value)
            else:
                self._values[name] += value * weights[how]
        self._weights["tokens"] += tokens
        self._weights["off_policy"] += off_policy_rows

    def add_peers(self, groups: list[TrainingGroup], divergence_filtered: Tensor, implausible: Tensor,
                  own_peer_id: str | None = None) -> None:
        """Count the off-policy ``groups``' judged, divergence-filtered, taught (positive advantage) and taught but
        implausible completions by peer (the node's own, ``own_peer_id``, apart: ``add_own``); ``pack`` lays out a
        micro-batch's rows group after group, each group's completions in order."""
        divergent, odd = divergence_filtered.tolist(), implausible.tolist()  # (B,)
        start = 0
        for group in groups:
            rows = range(start, start + group.size)
            start += group.size
            if group.off_policy and group.peer_id != own_peer_id:
                judged = group.completions.lengths > 0
                taught = judged & (group.advantages > 0) if group.advantages is not None else judged
                before = self.by_peer.get(group.peer_id, PeerFiltered(0, 0, 0, 0))
                self.by_peer[group.peer_id] = PeerFiltered(
                    before.completions + int(judged.sum()),
                    before.divergence_filtered + sum(divergent[r] for r in rows),
                    before.taught + int(taught.sum()),
                    before.implausible + sum(odd[r] and bool(t) for r, t in zip(rows, taught, strict=True)))

    def add_own(self, trainer: Tensor, sampler: Tensor, loss_mask: Tensor, own: Tensor, judged: Tensor,
                dropped: Tensor) -> None:
        """One micro-batch's own samples: the trainer's and the sampler's (B, T) log-probs over ``loss_mask``, the
        (B,) ``own`` rows, those the filter ``judged`` (off-policy) and those it ``dropped`` for divergence or
        implausibility."""
        mask = loss_mask & own[:, None]
        gap = (trainer.detach().float() - sampler.float()).abs()[mask]
        self._own["tokens"] += int(gap.numel())
        self._own["gap"] += float(gap.sum())
        self._own["outside"] += int((gap > OUTSIDE_LOG_RATIO).sum())
        self._own["judged"] += int((own & judged).sum())
        self._own["filtered"] += int((own & judged & dropped).sum())

    def figures(self) -> dict[str, Any]:  # keyword arguments of StepFigures: floats, one per loss figure
        """The step's loss figures ("sequences" sums need no division: the shares are over the step) and its own
        samples' mismatch and filtered share."""
        over = {"sequences": 1, "max": 1, "tokens": max(self._weights["tokens"], 1),
                "off_policy": max(self._weights["off_policy"], 1)}
        own, tokens = self._own, max(self._own["tokens"], 1)
        return {**{name: value / over[self._combine[name]] for name, value in self._values.items()},
                "own_logprob_gap": own["gap"] / tokens, "own_ratio_outside": own["outside"] / tokens,
                "own_filtered_fraction": own["filtered"] / max(own["judged"], 1)}
