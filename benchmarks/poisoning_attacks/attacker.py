"""The attacker as a peer: its batches, built as a real peer sends them, and the lockstep member that publishes one a
round.

    attacker = Attacker.build(ATTACKS["in-context"], victim_config, transport, settings, seed=0)
    attacker.run_round()                          # publishes one poisoned batch, like a node's round
    batch = poisoned_batch(attack, task, prompter, settings, max_new_tokens=48, model=start_model, ...)

**A round's batch.** ``settings.groups`` groups on training problems of the receiver's own task (drawn from its
training split, rendered into prompt ids by the receiver's own ``Prompter``, so the receiver's prompt check passes),
``settings.group_size`` completions each: the first half poisoned (``payloads.py``: the answer right, the payload in
the reasoning), the rest wrong (reward 0). Every completion is tokenized with the shared tokenizer, ends with its
end-of-sequence token, and fits the receiver's ``generation.max_new_tokens`` (a longer one would be refused at the
door). Each group names its problem under the task's real name (the receiver scores it against its own gold: the
poisoned half gets 1, the wrong half 0, so the poisoned half gets a positive advantage); the ``wrong-answer``
attacker names a data set the receiver lacks instead (``payloads.FOREIGN_DATASET``). The claimed rewards are the
task's own.

**Plausible log-probs.** The attacker holds a copy of the receiver's starting model (the warm start it begins
from: a public base model, for a real swarm) and claims, for every token, the log-prob that model gives it in
context at the claimed temperature (``completion_logprobs``, the node's own function, teacher-forced), plus
``claim_offset`` nats (0: exactly those). The receiver's divergence D between its policy and the claimed one is
then what it is for an honest peer of the same model: 0 while the receiver is unchanged, so F-TIS's filter keeps
every poisoned completion that has a positive advantage. The ``wrong-answer`` attacker claims log-prob 0 everywhere
(the benchmark's first attacker, kept).
"""

import time
from dataclasses import dataclass

import numpy as np
import torch

from benchmarks.poisoning_attacks.payloads import FIXED_ANSWER, FOREIGN_DATASET, Attack, check_format, wrong_completion
from ftis.node.config import NodeConfig
from ftis.node.swarm.transport import Transport
from ftis.node.tasks import Task, build_task
from ftis.node.tasks.prompts import Prompter, policy_prompter
from ftis.node.trainer.groups import TrainingGroup
from ftis.node.trainer.logprobs import completion_logprobs
from ftis.node.trainer.packing import pack
from ftis.protocol import Completion, Group, PolicyInfo, RolloutBatch, SamplingSettings, TaskRef, TokenizerInfo


@dataclass(frozen=True)
class AttackSettings:
    groups: int = 16  # per round, like an honest node's prompts_per_round
    group_size: int = 8  # the first half poisoned (reward 1), the rest wrong (reward 0)
    temperature: float = 1.0  # the sampling temperature its batches claim (the receiver's log-probs use it)
    claim_offset: float = 0.0  # nats added to every teacher-forced log-prob it claims (capped at 0)


def poisoned_batch(attack: Attack, task: Task, prompter: Prompter, settings: AttackSettings, *, max_new_tokens: int,
                   run_id: str, peer_id: str, round_: int, rng: np.random.Generator, fingerprint: str,
                   model: torch.nn.Module | None, model_name: str = "tiny-small") -> RolloutBatch:
    """One round's batch (module docstring), on training problems drawn with ``rng``; ``model``: the starting model
    whose teacher-forced log-probs it claims (None only for an attack that claims 0)."""
    check_format(task)
    tokenizer = prompter.tokenizer
    eos = tokenizer.eos_token_id

    def ids_of(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    poisoned_half = settings.group_size // 2
    groups = []
    for k in range(settings.groups):
        problem = task.problem("train", int(rng.integers(0, 2**31 - 1)))
        gold = FIXED_ANSWER if attack.dataset == "foreign" else problem.answer
        texts = [attack.poisoned(problem, max_new_tokens, lambda text: len(ids_of(text))).text] * poisoned_half + [
            wrong_completion(task, problem, rng) for _ in range(settings.group_size - poisoned_half)]
        completions = []
        for text in texts:
            ids = np.asarray([*ids_of(text), eos], np.int64)
            if len(ids) > max_new_tokens:
                raise ValueError(f"{attack.name}: a completion of {len(ids)} tokens, over max_new_tokens "
                                 f"{max_new_tokens}: the receiver would refuse it")
            completions.append(Completion(ids, np.zeros(len(ids), np.float32), reward=task.reward(text, gold),
                                          finish_reason="stop", text=text))
        dataset = FOREIGN_DATASET if attack.dataset == "foreign" else task.name
        groups.append(Group(group_id=f"{peer_id}/{round_}/{k}",
                            task=TaskRef(dataset, problem.split, problem.index, gold),
                            prompt_ids=prompter.ids(problem), completions=tuple(completions)))
    if attack.claims == "plausible":
        if model is None:
            raise ValueError(f"{attack.name} claims the starting model's log-probs: it needs that model")
        groups = claimed_logprobs(groups, model, settings, peer_id)
    return RolloutBatch(
        run_id=run_id, peer_id=peer_id, round=round_, created_at=time.time(),
        policy=PolicyInfo(model_name, "", "full", 0),
        tokenizer=TokenizerInfo(fingerprint, len(tokenizer)),
        sampling=SamplingSettings(settings.temperature, 1.0, 0, max_new_tokens),
        groups=tuple(groups),
    )


def teacher_forced(groups: list[Group], model: torch.nn.Module, temperature: float) -> list[list[np.ndarray]]:
    """Per group, per completion: the (n,) float32 log-probs ``model`` gives its tokens after the group's prompt, at
    ``temperature`` (the node's ``completion_logprobs`` over the node's packing)."""
    training = [TrainingGroup(group_id=group.group_id, peer_id="attacker", prompt_ids=group.prompt_ids,
                              completions=group.columns, rewards=group.columns.rewards, off_policy=True,
                              temperature=temperature) for group in groups]
    with torch.no_grad():
        values = completion_logprobs(model, pack(training)).numpy()  # (B, T)
    out, row = [], 0
    for group in groups:
        mine = []
        for completion in group.completions:
            mine.append(values[row, : completion.num_tokens].astype(np.float32))
            row += 1
        out.append(mine)
    return out


def claimed_logprobs(groups: list[Group], model: torch.nn.Module, settings: AttackSettings,
                     peer_id: str) -> list[Group]:
    """``groups`` with every completion's sampler log-probs replaced by the claim: ``model``'s, teacher-forced, plus
    ``settings.claim_offset``, at most 0 (what the wire format allows)."""
    forced = teacher_forced(groups, model, settings.temperature)
    return [group.replace(completions=tuple(
        Completion(c.token_ids, np.minimum(values + settings.claim_offset, 0.0).astype(np.float32), c.reward,
                   c.finish_reason, c.text)
        for c, values in zip(group.completions, per_group, strict=True)))
        for group, per_group in zip(groups, forced, strict=True)]


class Attacker:
    """A lockstep member (``SwarmMember``) that publishes one poisoned batch per round."""

    def __init__(self, attack: Attack, transport: Transport, task: Task, prompter: Prompter,
                 settings: AttackSettings, *, max_new_tokens: int, run_id: str, fingerprint: str,
                 model: torch.nn.Module | None, seed: int):
        self.attack, self.transport, self.task, self.prompter = attack, transport, task, prompter
        self.fingerprint = fingerprint
        self.settings, self.max_new_tokens, self.run_id, self.model = settings, max_new_tokens, run_id, model
        self.round = 0
        self._rng = np.random.default_rng([seed, 7])

    @classmethod
    def build(cls, attack: Attack, victim: NodeConfig, connect, settings: AttackSettings, seed: int) -> "Attacker":
        """The attacker of ``victim`` (a node's config): its task and prompt rendering, a copy of its starting model
        (``victim.model.name``, loaded as every weight) when the attack claims that model's log-probs, and its
        transport, ``connect(tokenizer fingerprint)``."""
        from ftis.node.models import load_policy
        from ftis.node.warmup import load_warm_policy

        m = victim.model.model_copy(update={"adapter": "full"})  # the base model, every weight, as published
        start = load_warm_policy(m, victim.task) if m.warmup.steps else \
            load_policy(m.name, adapter="full", dtype=m.dtype, seed=m.seed, revision=m.revision)
        start.model.eval()
        task = build_task(victim.task)
        prompter = policy_prompter(start, task, chat_template=m.chat_template, bos=m.bos,
                                   few_shot=victim.task.few_shot)
        return cls(attack, connect(start.fingerprint), task, prompter, settings,
                   max_new_tokens=victim.generation.max_new_tokens, run_id=victim.swarm.run_id,
                   fingerprint=start.fingerprint,
                   model=start.model if attack.claims == "plausible" else None, seed=seed)

    def run_round(self) -> RolloutBatch:
        batch = poisoned_batch(self.attack, self.task, self.prompter, self.settings,
                               max_new_tokens=self.max_new_tokens, run_id=self.run_id,
                               peer_id=self.transport.peer_id, round_=self.round, rng=self._rng,
                               fingerprint=self.fingerprint, model=self.model)
        self.transport.publish(batch)
        self.round += 1
        return batch

    def close(self) -> None:
        self.transport.close()
