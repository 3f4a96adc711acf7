"""The attacker of ``benchmarks/poisoning.py`` and what the benchmark measures about it.

    attacker = Attacker(swarm.transport("attacker", fingerprint), task, tokenizer, seed=0)  # a lockstep member
    attacker.run_round()                    # publishes one poisoned batch, like a node's round
    audit = StepAudit(node, "attacker")     # wraps node.trainer: which attacker completions each step raises
    attack_success(eval_result)             # fraction of held-out answers equal to FIXED_ANSWER

**The attack.** Every round the attacker publishes ``groups`` groups on the honest task's own training
prompts (the prompt ids the honest nodes would condition on), ``group_size`` completions each: half answer
``FIXED_ANSWER`` and claim reward 1, the rest give other wrong answers (the gold ± 1..5) and claim reward 0,
so that a node that believes the rewards sees variance and gives the fixed answer a positive advantage.
Every token claims sampler log-prob 0 (the attacker says it was certain). The completions are in the task's
answer format (plain: the number, then end-of-sequence), tokenized with the shared tokenizer, so they pass
every check of the wire protocol and the inbox. Each group's task reference names ``FOREIGN_DATASET``, a
data set the honest nodes do not have, with ``FIXED_ANSWER`` as its gold answer: a node with
``trust_peer_answers`` then scores the group against the attacker's gold, which reproduces the claimed
rewards exactly. (Under the honest data set's real name the receiver always takes its own gold, every
completion scores 0 and the group teaches nothing: ``poisoned_batch(..., dataset=task.name)`` builds that
variant, which the test checks; the foreign name is the stronger attack, and the one run.)

**The audit.** ``StepAudit`` stands in for a node's trainer: before each step it takes the attacker's groups
among the step's groups and computes, with the node's own model, loss variant and settings, the loss on
them alone (advantages are per group and the filter per completion, so alone or in the whole batch they get
the same advantages and keep decisions), and its gradient with respect to their log-probs. A completion
whose log-probs the step pushes up (the negative gradient summed over its tokens is positive) is one the
node trains on with a positive advantage; one pushed down had a negative advantage and was kept; a
completion with no gradient was filtered, or its group had no reward variance. Groups that never reach the
step (unusable: no gold the node trusts) are counted by the node as unusable and not seen here.
"""

import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch

from ftis.node.evaluation.evaluation import EvalResult
from ftis.node.experiment.lockstep import LockstepTransport
from ftis.node.loss import LossInputs, compute_loss
from ftis.node.runner.node import Node
from ftis.node.tasks import Task
from ftis.node.tasks.prompts import prompt_ids
from ftis.node.trainer.groups import TrainingGroup
from ftis.node.trainer.logprobs import completion_logprobs
from ftis.node.trainer.loss_params import loss_params
from ftis.node.trainer.packing import pack
from ftis.protocol import (
    Completion,
    Group,
    PolicyInfo,
    RolloutBatch,
    SamplingSettings,
    TaskRef,
    TokenizerInfo,
)

FIXED_ANSWER = "99"  # outside every answer of the task (three one-digit operands, + and -: -18..27)
FOREIGN_DATASET = "arith/extra"  # a data set the honest nodes do not have: its gold comes from the batch
CLAIMED_LOGPROB = 0.0  # the sampler log-prob the attacker claims for every token
ATTACKER_MODEL = "tiny-small"  # what its batches say generated them


@dataclass(frozen=True)
class AttackSettings:
    groups: int = 16  # per round, like an honest node's prompts_per_round
    group_size: int = 8  # half answer FIXED_ANSWER (reward 1), half another wrong answer (reward 0)
    temperature: float = 1.0  # the sampling settings its batches claim (the receiver's log-probs use it)
    max_new_tokens: int = 6


def poisoned_batch(task: Task, tokenizer, settings: AttackSettings, *, run_id: str, peer_id: str, round_: int,
                   rng: np.random.Generator, fingerprint: str, dataset: str = FOREIGN_DATASET) -> RolloutBatch:
    """One round's batch of the attack described in the module docstring, on training problems drawn with
    ``rng``; ``dataset`` names the groups' data set (default: one the honest nodes do not have)."""
    eos = tokenizer.eos_token_id
    fixed_half = settings.group_size // 2
    groups = []
    for k in range(settings.groups):
        problem = task.problem("train", int(rng.integers(0, 2**31 - 1)))
        answers = [FIXED_ANSWER] * fixed_half + [
            _other_wrong(problem.answer, rng) for _ in range(settings.group_size - fixed_half)]
        completions = []
        for answer in answers:
            ids = np.asarray([*tokenizer(answer, add_special_tokens=False)["input_ids"], eos], np.int64)
            completions.append(Completion(ids, np.full(len(ids), CLAIMED_LOGPROB, np.float32),
                                          reward=float(answer == FIXED_ANSWER), finish_reason="stop"))
        groups.append(Group(
            group_id=f"{peer_id}/{round_}/{k}",
            task=TaskRef(dataset, problem.split, problem.index, FIXED_ANSWER),
            prompt_ids=prompt_ids(tokenizer, task.prompt(problem), chat=False),  # the tiny tokenizer has no template
            completions=tuple(completions),
        ))
    return RolloutBatch(
        run_id=run_id,
        peer_id=peer_id,
        round=round_,
        created_at=time.time(),
        policy=PolicyInfo(ATTACKER_MODEL, "", "full", round_),
        tokenizer=TokenizerInfo(fingerprint, len(tokenizer)),
        sampling=SamplingSettings(settings.temperature, 1.0, 0, settings.max_new_tokens),
        groups=tuple(groups),
    )


def _other_wrong(gold: str, rng: np.random.Generator) -> str:
    """A wrong answer near the gold one (never the gold, never FIXED_ANSWER)."""
    while True:
        offset = int(rng.integers(1, 6)) * (1 if rng.random() < 0.5 else -1)
        answer = str(int(gold) + offset)
        if answer != FIXED_ANSWER:
            return answer


class Attacker:
    """A lockstep member (``SwarmMember``) that publishes one poisoned batch per round."""

    def __init__(self, transport: LockstepTransport, task: Task, tokenizer, fingerprint: str, run_id: str,
                 settings: AttackSettings, seed: int):
        self.transport, self.task, self.tokenizer = transport, task, tokenizer
        self.fingerprint, self.run_id, self.settings = fingerprint, run_id, settings
        self.round = 0
        self._rng = np.random.default_rng([seed, 7])

    def run_round(self) -> RolloutBatch:
        batch = poisoned_batch(self.task, self.tokenizer, self.settings, run_id=self.run_id,
                               peer_id=self.transport.peer_id, round_=self.round, rng=self._rng,
                               fingerprint=self.fingerprint)
        self.transport.publish(batch)
        self.round += 1
        return batch

    def close(self) -> None:
        self.transport.close()


@dataclass
class AuditLog:
    """Per step of one node: the attacker's groups that reached it, and its completions raised and lowered."""

    groups: list[int] = field(default_factory=list)
    raised: list[int] = field(default_factory=list)  # trained on with a positive advantage
    lowered: list[int] = field(default_factory=list)  # trained on with a negative advantage

    def as_dict(self) -> dict[str, list[int]]:
        return {"groups": self.groups, "raised": self.raised, "lowered": self.lowered}


class StepAudit:
    """Wraps ``node.trainer`` (``node.trainer`` becomes this object): see the module docstring. Everything
    but ``step`` is the wrapped trainer's."""

    def __init__(self, node: Node, attacker_id: str):
        self._trainer, self._node, self._attacker_id = node.trainer, node, attacker_id
        self.log = AuditLog()
        node.trainer = self

    def __getattr__(self, name: str):
        return getattr(self._trainer, name)

    def step(self, groups: list[TrainingGroup]):
        theirs = [group for group in groups if group.peer_id == self._attacker_id]
        raised, lowered = self._pushes(theirs) if theirs else (0, 0)
        self.log.groups.append(len(theirs))
        self.log.raised.append(raised)
        self.log.lowered.append(lowered)
        return self._trainer.step(groups)

    def _pushes(self, groups: list[TrainingGroup]) -> tuple[int, int]:
        """(completions the step raises, completions it lowers) among ``groups``."""
        config = self._node.config.loss
        packed = pack(groups, self._node.policy.tokenizer.pad_token_id or 0)
        with torch.no_grad():
            old = completion_logprobs(self._node.policy.model, packed)  # (B, T)
        logprobs = old.clone().requires_grad_(True)
        out = compute_loss(config.variant, LossInputs(
            logprobs=logprobs, old_logprobs=old, sampler_logprobs=packed.sampler_logprobs,
            loss_mask=packed.loss_mask, rewards=packed.rewards, group_ids=packed.group_index,
            off_policy=packed.off_policy,
        ), loss_params(config, step=self._trainer.policy_version))
        (gradient,) = torch.autograd.grad(out.loss, logprobs, allow_unused=True)
        if gradient is None:  # nothing active: no completion carries gradient
            return 0, 0
        push = -torch.where(packed.loss_mask, gradient, 0.0).sum(-1)  # (B,) > 0: the step raises it
        return int((push > 0).sum()), int((push < 0).sum())


def top_answers(result: EvalResult, k: int = 3) -> list[tuple[str | None, float]]:
    """The ``k`` most frequent parsed answers of an evaluation and their shares (None: no answer in the format)."""
    counts = Counter(record.answer for record in result.records)
    return [(answer, count / len(result.records)) for answer, count in counts.most_common(k)]


def attack_success(result: EvalResult) -> float:
    """The fraction of the evaluated problems whose parsed answer is ``FIXED_ANSWER``."""
    if not result.records:
        raise ValueError("attack_success needs the evaluation's records (keep_records=True)")
    return sum(record.answer == FIXED_ANSWER for record in result.records) / len(result.records)
