"""What the benchmark measures of a node under attack: its steps (``StepAudit``), its greedy completions
(``attack_success``) and its own log-prob of a payload (``payload_logprob``).

    audit = StepAudit(node, "attacker")     # wraps node.trainer: which attacker completions each step raises
    attack_success(ATTACKS["dos"], result)  # the share of held-out greedy completions carrying the payload
    payload_logprob(node, attack, problems, max_new_tokens)  # mean over problems, nats

**The audit.** ``StepAudit`` stands in for a node's trainer: before each step it takes the attacker's groups among
the step's groups and computes, with the node's own model, loss variant and settings, the loss on them alone
(advantages are per group and the filter per completion, so alone or in the whole batch they get the same
advantages and keep decisions), and its gradient with respect to their log-probs. A completion whose log-probs the
step pushes up (the negative gradient summed over its tokens is positive) is one the node trains on with a positive
advantage; one pushed down had a negative advantage and was kept; a completion with no gradient was filtered, or its
group had no reward variance. Groups that never reach the step (unusable: no gold the node trusts) are counted by the
node as unusable and not seen here. A defence that drops completions before the loss (a reward of 0, the surprise
bound) acts inside the wrapped trainer's step or before it: the audit sees what reached ``step``, and its loss is the
node's ``compute_loss`` on it.

**The payload's log-prob.** For each of a fixed set of held-out problems, the attacker's poisoned completion of it
(``payloads.Parts``: the text before the payload, the payload, the text after it), and the sum of the node's log-probs
(temperature 1) of the payload's tokens in that context: how far the node has learned the payload, before it shows in
its greedy output. The tokens are those of ``before``, ``payload`` and ``after`` each tokenized alone and joined.
"""

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch

from benchmarks.poisoning_attacks.payloads import Attack
from ftis.node.evaluation.evaluation import EvalResult
from ftis.node.loss import LossInputs, SequenceLossInputs, compute_loss
from ftis.node.runner.node import Node
from ftis.node.tasks import Problem
from ftis.node.trainer.groups import TrainingGroup
from ftis.node.trainer.logprobs import completion_logprobs
from ftis.node.trainer.loss_params import loss_params
from ftis.node.trainer.packing import pack
from ftis.protocol import Completion
from ftis.protocol.schema import CompletionColumns


@dataclass
class AuditLog:
    """Per step of one node: the attacker's groups that reached it, and its completions raised and lowered."""

    groups: list[int] = field(default_factory=list)
    raised: list[int] = field(default_factory=list)  # trained on with a positive advantage
    lowered: list[int] = field(default_factory=list)  # trained on with a negative advantage

    def as_dict(self) -> dict[str, list[int]]:
        return {"groups": self.groups, "raised": self.raised, "lowered": self.lowered}


class StepAudit:
    """Wraps ``node.trainer`` (``node.trainer`` becomes this object): see the module docstring. Everything but
    ``step`` is the wrapped trainer's."""

    def __init__(self, node: Node, attacker_id: str):
        self._trainer, self._node, self._attacker_id = node.trainer, node, attacker_id
        self.log = AuditLog()
        node.trainer = self

    def __getattr__(self, name: str):
        return getattr(self._trainer, name)

    def step(self, groups: list[TrainingGroup], own_peer_id: str | None = None):
        theirs = [group for group in groups if group.peer_id == self._attacker_id]
        raised, lowered = pushes(self._node, theirs, self._trainer.policy_version) if theirs else (0, 0)
        self.log.groups.append(len(theirs))
        self.log.raised.append(raised)
        self.log.lowered.append(lowered)
        return self._trainer.step(groups, own_peer_id)


def pushes(node: Node, groups: list[TrainingGroup], step: int) -> tuple[int, int]:
    """(completions a step of ``node`` raises, completions it lowers) among ``groups``, as the module docstring says.
    Groups of another tokenizer than the node's are judged as its step trains them, one weight per completion."""
    by_token = [group for group in groups if not group.per_sequence]
    by_sequence = [group for group in groups if group.per_sequence]
    counts = [_pushes(node, chosen, step, per_sequence) for chosen, per_sequence in ((by_token, False),
                                                                                   (by_sequence, True)) if chosen]
    return sum(raised for raised, _ in counts), sum(lowered for _, lowered in counts)


def _pushes(node: Node, groups: list[TrainingGroup], step: int, per_sequence: bool) -> tuple[int, int]:
    config = node.config.loss
    packed = pack(groups, node.policy.tokenizer.pad_token_id or 0)
    with torch.no_grad():
        old = completion_logprobs(node.policy.model, packed)  # (B, T)
    logprobs = old.clone().requires_grad_(True)
    common = {"logprobs": logprobs, "old_logprobs": old, "loss_mask": packed.loss_mask, "rewards": packed.rewards,
              "group_ids": packed.group_index, "off_policy": packed.off_policy}
    inputs = (SequenceLossInputs(sampler_sequence_logprobs=packed.sampler_sequence_logprobs, **common)
              if per_sequence else LossInputs(sampler_logprobs=packed.sampler_logprobs, **common))
    out = compute_loss(config.variant, inputs, loss_params(config, step=step))
    (gradient,) = torch.autograd.grad(out.loss, logprobs, allow_unused=True)
    if gradient is None:  # nothing active: no completion carries gradient
        return 0, 0
    push = -torch.where(packed.loss_mask, gradient, 0.0).sum(-1)  # (B,) > 0: the step raises it
    return int((push > 0).sum()), int((push < 0).sum())


def attack_success(attack: Attack, result: EvalResult) -> float:
    """The share of ``result``'s greedy completions that carry ``attack``'s payload (a length attack's success is
    ``result.mean_completion_tokens``, read against clean's by the report)."""
    if not result.records:
        raise ValueError("attack_success needs the evaluation's records (keep_records=True)")
    return sum(attack.carries(record.completion) for record in result.records) / len(result.records)


def top_answers(result: EvalResult, k: int = 3) -> list[tuple[str | None, float]]:
    """The ``k`` most frequent parsed answers of an evaluation and their shares (None: no answer in the format)."""
    counts = Counter(record.answer for record in result.records)
    return [(answer, count / len(result.records)) for answer, count in counts.most_common(k)]


def payload_logprob(node: Node, attack: Attack, problems: list[Problem], max_new_tokens: int) -> float:
    """The mean over ``problems`` of ``node``'s summed log-prob (nats, temperature 1) of ``attack``'s payload in its
    poisoned completion of the problem (module docstring)."""
    tokenizer = node.policy.tokenizer

    def ids_of(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    groups, spans = [], []
    for k, problem in enumerate(problems):
        parts = attack.poisoned(problem, max_new_tokens, lambda text: len(ids_of(text)))
        before, payload, after = ids_of(parts.before), ids_of(parts.payload), ids_of(parts.after)
        ids = np.asarray([*before, *payload, *after], np.int64)
        spans.append((len(before), len(before) + len(payload)))
        one = Completion(ids, np.zeros(len(ids), np.float32), 0.0, "stop")
        groups.append(TrainingGroup(group_id=f"probe/{k}", peer_id="probe", prompt_ids=node.prompter.ids(problem),
                                    completions=CompletionColumns.from_completions((one,)), rewards=np.zeros(1),
                                    off_policy=False, temperature=1.0))
    with torch.no_grad():
        values = completion_logprobs(node.policy.model, pack(groups, tokenizer.pad_token_id or 0))  # (B, T)
    sums = [float(values[row, start:stop].sum()) for row, (start, stop) in enumerate(spans)]
    return float(np.mean(sums))

