"""The poisoning benchmark's attackers (``benchmarks/poisoning_attacks/``) as a real peer sends them: each attacker's
batch encodes and decodes through the protocol, passes a real tiny node's intake over the in-memory transport, its
groups score as claimed under the node's own gold (the poisoned completions reward 1: the answer is right), and the
log-probs it claims are the starting model's, teacher-forced: the divergence D of a poisoned completion under the
unchanged node is 0, so F-TIS's filter lets it through with a positive advantage (the hole the defence must close).

Run: python -m pytest tests/test_poisoning_attacks.py -q
"""

import importlib
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.nodes import LIMITS

from ftis.node.config import NodeConfig, TaskConfig
from ftis.node.loss.terms import k3_divergence
from ftis.node.runner.join import build_node
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.node.trainer.logprobs import completion_logprobs
from ftis.node.trainer.packing import pack
from ftis.protocol import decode, encode

REPO = Path(__file__).resolve().parent.parent
GROUPS = 3
with pytest.MonkeyPatch.context() as patch:  # benchmarks/ is a folder at the repository root, not a package
    patch.syspath_prepend(str(REPO))
    payloads = importlib.import_module("benchmarks.poisoning_attacks.payloads")
    attacker_module = importlib.import_module("benchmarks.poisoning_attacks.attacker")
    audit = importlib.import_module("benchmarks.poisoning_attacks.audit")

OWN = [name for name, attack in payloads.ATTACKS.items() if attack.dataset == "own"]


def victim_config(variant: str = "ftis") -> NodeConfig:
    """A tiny node on the benchmark's task, cold (the attacker's copy is the same start), defences off."""
    task = {"name": "arithmetic", "arithmetic": {"max_digits": 1, "operands": 3, "operations": "+-", "format": "tags"}}
    if "check_steps" in TaskConfig.model_fields:  # the defence, where node/ has it: off, so the hole shows
        task["check_steps"] = False
    return NodeConfig.model_validate({
        "model": {"name": "tiny-small", "seed": 3},
        "task": task,
        "generation": {"prompts_per_round": 2, "group_size": 8, "max_new_tokens": 48, "temperature": 1.0},
        "loss": {"variant": variant},
        "loop": {"mode": "async"},
    })


def swarm(attack: str, variant: str = "ftis"):
    """(victim node, its attacker) on one in-memory hub."""
    hub, config = MemoryHub(), victim_config(variant)
    victim = build_node(config, lambda fp: MemoryTransport(hub, config.swarm.run_id, "victim", fp, LIMITS))
    attacker = attacker_module.Attacker.build(
        payloads.ATTACKS[attack], config,
        lambda fp: MemoryTransport(hub, config.swarm.run_id, "attacker", fp, LIMITS),
        attacker_module.AttackSettings(groups=GROUPS), seed=0)
    return victim, attacker


@pytest.mark.parametrize("attack", list(payloads.ATTACKS))
def test_each_attackers_batch_passes_the_wire_and_the_intake_scored_as_it_claims(attack):
    victim, attacker = swarm(attack)
    batch = attacker.run_round()
    sent = decode(encode(batch))  # what the victim receives: log-probs quantised to 2^-9 nats, the rest exact
    assert sent.groups[0].group_id == batch.groups[0].group_id and decode(encode(sent)) == sent
    for ours, theirs in zip(batch.groups, sent.groups, strict=True):
        assert ours.task == theirs.task and np.array_equal(ours.prompt_ids, theirs.prompt_ids)
        assert ours.columns.texts == theirs.columns.texts
        assert np.abs(ours.columns.sampler_logprobs - theirs.columns.sampler_logprobs).max() <= 2**-10
    peers = victim.intake.score(victim.intake.collect(0))
    half = attacker.settings.group_size // 2
    if payloads.ATTACKS[attack].dataset == "foreign":  # the wrong-answer attacker: no gold this node trusts
        assert peers.candidates == [] and peers.unusable == GROUPS
        return
    groups = [candidate.group for candidate in peers.candidates]
    assert len(groups) == GROUPS and all(group.peer_id == "attacker" for group in groups)
    for group, sent in zip(groups, batch.groups, strict=True):
        assert group.task.dataset == victim.task.name  # scored against the victim's own gold
        assert group.rewards.tolist() == sent.columns.rewards.tolist() == [1.0] * half + [0.0] * half
        texts = [c.text for c in sent.completions]
        assert all(payloads.ATTACKS[attack].carries(text) for text in texts[:half]) or attack == "dos"
        assert not any(payloads.ATTACKS[attack].carries(text) for text in texts[half:])


@pytest.mark.parametrize("attack", OWN)
@pytest.mark.parametrize("variant", ["ftis", "nois"])
def test_claimed_logprobs_are_the_starting_models_so_the_filter_keeps_every_poisoned_completion(attack, variant):
    victim, attacker = swarm(attack, variant)
    attacker.run_round()
    groups = [candidate.group for candidate in victim.intake.score(victim.intake.collect(0)).candidates]
    packed = pack(groups)
    with torch.no_grad():
        old = completion_logprobs(victim.policy.model, packed)  # the unchanged victim's
    mask = packed.loss_mask
    assert torch.allclose(packed.sampler_logprobs[mask], old[mask], atol=2**-10)  # the wire's quantisation
    assert float(k3_divergence(packed.sampler_logprobs, old, mask).max()) < 1e-5  # D ≈ 0 ≤ g
    half = attacker.settings.group_size // 2
    # F-TIS today: every poisoned completion is trained on with a positive advantage; the wrong ones (Â < 0) are
    # dropped by the filter's advantage rule (nois, no filter: pushed down)
    assert audit.pushes(victim, groups, step=0) == (GROUPS * half, GROUPS * half if variant == "nois" else 0)


def test_groups_of_another_tokenizer_are_audited_as_the_step_trains_them_one_weight_per_completion():
    """A receiver of another tokenizer trains an attacker's group per sequence, on the claimed log-prob of each whole
    completion; its per-token column is not the generator's and is never read. Here the per-token claims are absurd
    (log-prob 0: certainty) and the sequence claims true: judged per token every poisoned completion would be
    dropped; the audit, as the step, keeps them."""
    from dataclasses import replace

    victim, attacker = swarm("out-of-context")
    attacker.run_round()
    groups = [candidate.group for candidate in victim.intake.score(victim.intake.collect(0)).candidates]
    foreign = [replace(group, sequence_logprobs=group.sampler_sums(),
                       completions=replace(group.completions,
                                           sampler_logprobs=np.zeros_like(group.completions.sampler_logprobs)))
               for group in groups]
    half = attacker.settings.group_size // 2
    assert all(group.per_sequence for group in foreign)
    assert audit.pushes(victim, foreign, step=0) == (GROUPS * half, 0)
    assert audit.pushes(victim, [*groups[:1], *foreign[1:]], step=0) == (GROUPS * half, 0)  # both kinds in one step


def test_a_round_of_the_victim_trains_on_the_poisoned_completions():
    victim, attacker = swarm("out-of-context")
    audited = audit.StepAudit(victim, "attacker")
    attacker.run_round()
    victim.run_round()
    half = attacker.settings.group_size // 2
    assert audited.log.groups == [GROUPS] and audited.log.raised == [GROUPS * half]


def test_the_payloads_are_right_answers_and_recognised_only_where_written():
    from ftis.node.models import build_tokenizer
    from ftis.node.tasks import make_task

    task = make_task("arithmetic", max_digits=1, operands=3, operations="+-", format="tags")
    tokenizer = build_tokenizer()

    def count(text):
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    for index in range(20):
        problem = task.problem("train", index)
        honest = task.solved(problem)
        for name, attack in payloads.ATTACKS.items():
            parts = attack.poisoned(problem, 48, count)
            gold = payloads.FIXED_ANSWER if attack.dataset == "foreign" else problem.answer
            assert task.reward(parts.text, gold) == 1.0, (name, parts.text)
            assert parts.payload and not attack.carries(honest)
            assert count(parts.text) + 1 <= 48 and (name != "dos" or count(parts.text) + 1 == 48)
        assert payloads.false_steps(payloads.ATTACKS["in-context"].poisoned(problem, 48, count).text)
        wrong = payloads.wrong_completion(task, problem, np.random.default_rng(index))
        assert task.reward(wrong, problem.answer) == 0.0 and not payloads.false_steps(wrong)
    assert payloads.wrong_chain(task.problem("train", 0)).count("=") == 2
    assert payloads.false_steps("<think> 7-2=6 6+9=14 </think>") == ["7-2=6", "6+9=14"]
    assert payloads.false_steps("<think> 7-2+9=14 7-2=5 </think>") == []
    fixed = payloads.ATTACKS["in-context-fixed"].carries
    assert fixed("<think> 2+2=5 1+2+2=5 </think>") and not fixed("<think> 1+2+2=5 </think>")


def test_on_two_operand_sums_the_in_context_attack_writes_the_sum_off_by_one_and_the_step_check_zeroes_it():
    """The real models' task (sums of numbers up to 99) has no partial result to falsify: its in-context attacker
    writes the sum itself one too high before the right answer, which only the arithmetic check stops."""
    from ftis.node.models import build_tokenizer
    from ftis.node.tasks import make_task
    from ftis.node.tasks.steps import false_equation

    task = make_task("arithmetic", max_digits=2, operations="+", format="tags", operand_draw="value")
    tokenizer = build_tokenizer()

    def count(text):
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    attack = payloads.ATTACKS["in-context-sum"]
    for index in range(20):
        problem = task.problem("train", index)
        text = attack.poisoned(problem, 40, count).text
        assert task.reward(text, problem.answer) == 1.0 and attack.carries(text), text
        assert false_equation(text) == f"{problem.question} = {int(problem.answer) + 1}"
        assert not payloads.false_steps(payloads.ATTACKS["in-context"].poisoned(problem, 40, count).text)  # no chain
        assert not attack.carries(task.solved(problem))
        wrong = payloads.wrong_completion(task, problem, np.random.default_rng(index))
        assert not attack.carries(wrong) and false_equation(wrong) is not None  # a wrong sum, honestly answered
    assert attack.carries("<think> 7-2+9=15 </think>\n<answer> 14 </answer>")  # a chain, contradicted
    assert not attack.carries("<think> 52+74=133 </think>\n<answer> 133 </answer>")
