"""The intake's door and what lies behind it, against a hostile peer on the in-memory transport: a completion
longer than the node samples is never paid for and charges its peer; no forward pass is larger than
``max_tokens_per_microbatch``, whatever a group holds; a step scores a bounded number of a peer's completions, in
bounded time; a group whose scoring raises is unusable and charged, and the round goes on; numbers too long to read
read as none.

Each test builds a real tiny node (``helpers/nodes.py``) and a peer publishing hand-made batches of the node's own
problems, with the node's own prompts, so that only what the test varies decides what happens."""

import dataclasses
import time

import numpy as np
import pytest
import torch
from helpers.nodes import LIMITS, DigitTask, make_node

from ftis.node.intake.admission import Admission, AdmissionLimits
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.node.swarm.transport import ReceivedBatch
from ftis.node.tasks import Problem
from ftis.node.tasks.numeric import same_number, tagged_number_reward
from ftis.node.trainer.logprobs import output_layer
from ftis.protocol import Completion, Group, PolicyInfo, RolloutBatch, SamplingSettings, TaskRef, TokenizerInfo

MAX_TOKENS = 64  # the node's max_tokens_per_microbatch in these tests


def node_on(hub: MemoryHub, **sections):
    return make_node(hub, "node", trainer={"learning_rate": 1e-2, "max_tokens_per_microbatch": MAX_TOKENS},
                     **sections)


def peer_batch(node, peer_id: str, groups: int, size: int, length: int, *, first_index: int = 1000,
               round_: int = 0) -> RolloutBatch:
    """``groups`` groups of ``size`` completions of ``length`` tokens each, on the node's problems with its own
    prompts; half of each group's completions hold a digit (DigitTask's reward 1), half none."""
    tokenizer = node.policy.tokenizer
    digit = tokenizer("7", add_special_tokens=False)["input_ids"][-1]
    letter = tokenizer("x", add_special_tokens=False)["input_ids"][-1]
    made = []
    for k in range(groups):
        problem = node.task.problem("train", first_index + k)
        completions = tuple(
            Completion(token_ids=np.full(length, digit if c % 2 else letter, np.int64),
                       sampler_logprobs=np.full(length, -1.0, np.float32), reward=0.0, finish_reason="length")
            for c in range(size))
        made.append(Group(f"{peer_id}/{round_}/{k}", TaskRef(problem.dataset, problem.split, problem.index,
                                                            problem.answer), node.prompter.ids(problem), completions))
    return RolloutBatch(node.config.swarm.run_id, peer_id, round_, time.time(), PolicyInfo("tiny", "", "full", 0),
                        TokenizerInfo(node.policy.fingerprint, len(tokenizer)),
                        SamplingSettings(1.0, 1.0, 0, max(length, 1)), tuple(made))


def publish(hub: MemoryHub, node, peer_id: str, *batches: RolloutBatch) -> MemoryTransport:
    peer = MemoryTransport(hub, node.config.swarm.run_id, peer_id, node.policy.fingerprint, LIMITS)
    for batch in batches:
        peer.publish(batch)
    return peer


def largest_training_pass(node) -> list[int]:
    """Records the tokens of each call of the node's decoder with gradients (the trainer's: generation and evaluation
    run without), padding included: a micro-batch's prompts, then its completions (``trainer/logprobs.py``)."""
    passes: list[int] = []

    def count(module, args, kwargs):
        if torch.is_grad_enabled():
            ids = kwargs.get("input_ids", args[0] if args else None)
            passes.append(int(ids.numel()))

    output_layer(node.policy.model).decoder.register_forward_pre_hook(count, with_kwargs=True)
    return passes


def rejections(node, peer_id: str) -> dict[str, int]:
    return {reason: count for (peer, reason), count in node.transport.stats().rejections.items() if peer == peer_id}


def test_completions_longer_than_the_node_samples_are_never_trained_on_and_charge_their_peer():
    # 16 completions of 200 tokens each: the node samples at most 6. Past the door, the group would be trained on in
    # one pass of 16 rows of ~206 tokens, whatever max_tokens_per_microbatch said.
    hub = MemoryHub()
    node = node_on(hub)
    passes = largest_training_pass(node)
    publish(hub, node, "mallory", peer_batch(node, "mallory", groups=2, size=16, length=200))
    report = node.run_round()
    assert rejections(node, "mallory") == {"too_long": 1}  # charged once for the batch
    assert report.peer_groups_received == 0 and report.step.peer_groups == 0
    assert passes and max(passes) <= MAX_TOKENS
    assert node.transport.scores()["mallory"].score < 1.0
    node.run_round()  # and the node goes on


def test_no_forward_pass_exceeds_the_bound_whatever_a_group_holds():
    # One group of 64 completions of the node's own length: each row fits, the group does not (64 × ~12 tokens).
    hub = MemoryHub()
    node = node_on(hub)
    passes = largest_training_pass(node)
    publish(hub, node, "peer", peer_batch(node, "peer", groups=1, size=64, length=6))
    report = node.run_round()
    assert report.step.trained and report.step.peer_groups == 1  # the group was trained on, split across passes
    assert report.step.sequences >= 64
    assert max(passes) <= MAX_TOKENS, max(passes)


class FailingTask(DigitTask):
    """DigitTask, whose reward raises on the gold answer of problem 7 (a bug, or a text it cannot read)."""

    def problem(self, split: str, index: int) -> Problem:
        problem = super().problem(split, index)
        return Problem(problem.dataset, split, index, problem.question, "boom") if index == 7 else problem

    def reward(self, completion_text: str, gold: str) -> float:
        if gold == "boom":
            raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")
        return super().reward(completion_text, gold)


def test_a_group_whose_scoring_raises_is_unusable_and_charged_and_the_round_goes_on():
    hub = MemoryHub()
    node = node_on(hub)
    node.task = node.intake.task = FailingTask()
    publish(hub, node, "peer", peer_batch(node, "peer", groups=1, size=4, length=3, first_index=7),
            peer_batch(node, "peer", groups=1, size=4, length=3, first_index=8, round_=1))
    report = node.run_round()
    assert report.unusable_groups == 1 and report.peer_groups_received == 1  # the other batch's group is scored
    assert rejections(node, "peer") == {"scoring_failed": 1}
    assert report.step.trained
    node.run_round()


def test_a_step_scores_a_bounded_share_of_one_peers_completions():
    # mix.max_peer_groups = 2, group_size = 6: a step scores at most 4 × 2 × 6 = 48 completions, half from one peer.
    hub = MemoryHub()
    node = node_on(hub, mix={"max_peer_groups": 2})
    limits = AdmissionLimits.of(node.config)
    assert (limits.max_scored, limits.max_scored_per_peer) == (48, 24)
    publish(hub, node, "flood", *(peer_batch(node, "flood", groups=40, size=6, length=3, round_=r) for r in range(3)))
    report = node.run_round()
    assert report.peer_groups_received == 4  # 24 completions: 4 groups of 6
    assert report.unscored_groups == 3 * 40 - 4
    assert report.peer_groups_used <= 2


def test_scoring_stops_when_the_steps_time_for_it_is_spent():
    hub = MemoryHub()
    node = node_on(hub, mix={"max_scoring_s": 0.2})

    class SlowTask(DigitTask):  # a check as slow as math_verify can be on a hard answer
        def reward(self, completion_text: str, gold: str) -> float:
            if gold == "3":
                time.sleep(0.05)
            return super().reward(completion_text, gold)

    node.task = node.intake.task = SlowTask()
    publish(hub, node, "slow", peer_batch(node, "slow", groups=10, size=6, length=3, first_index=3))
    started = time.monotonic()
    for k in range(10):  # every group names a problem whose gold is "3": 0.3 s of scoring each
        assert node.task.problem("train", 3 + 10 * k).answer == "3"
    report = node.run_round()
    assert report.seconds["score_peers"] < 0.2 + 0.3 + 0.2  # the budget, one group begun before it ran out, slack
    assert report.unscored_groups >= 7
    assert time.monotonic() - started < 5


def test_admission_takes_turns_between_peers_and_never_exceeds_the_budget():
    hub = MemoryHub()
    node = node_on(hub, mix={"max_peer_groups": 2, "max_peer_share": 1.0})
    admission = Admission(AdmissionLimits.of(node.config), node.policy.fingerprint)
    budget = admission.budget()
    now = time.time()
    received = [ReceivedBatch("a", peer_batch(node, "a", groups=20, size=6, length=3), 0, now),
                ReceivedBatch("b", peer_batch(node, "b", groups=2, size=6, length=3), 0, now)]
    admitted = admission.admit(received, budget)
    sizes = [len(item.batch.groups) for item in admitted.received]
    assert sizes == [6, 2]  # 48 completions: b's two groups get their turns though a's batch came first
    assert admitted.unscored == 14 and admitted.too_long == []
    again = admission.admit([ReceivedBatch("b", peer_batch(node, "b", groups=1, size=6, length=3), 0, now)], budget)
    assert len(again.received[0].batch.groups) == 0 and again.unscored == 1  # the step's budget is spent


@pytest.mark.parametrize("digits", [65, 4301, 100_000])
def test_a_number_too_long_to_read_reads_as_none(digits):
    answer = "9" * digits
    assert tagged_number_reward(f"<think> 9 </think> <answer> {answer} </answer>", "5") == 0.0
    assert not same_number(answer, answer)
    assert same_number("9" * 64, "9" * 64)  # the longest number read


def test_a_group_of_a_problem_the_node_lacks_must_fit_one_pass():
    # With trusted peer answers a node trains on problems it lacks, whose prompts are the peer's: 2,000 tokens of
    # prompt would be one pass of 2,000+ tokens whatever max_tokens_per_microbatch says.
    hub = MemoryHub()
    node = node_on(hub, task={"trust_peer_answers": True})
    passes = largest_training_pass(node)
    batch = peer_batch(node, "mallory", groups=2, size=4, length=3)
    groups = tuple(group.replace(task=TaskRef("elsewhere", "train", k, "7"), prompt_ids=np.full(2000, 5, np.int64))
                   for k, group in enumerate(batch.groups))
    publish(hub, node, "mallory", dataclasses.replace(batch, groups=groups))
    report = node.run_round()
    assert rejections(node, "mallory") == {"too_long": 1}
    assert report.unusable_groups == 2 and report.step.peer_groups == 0
    assert max(passes) <= MAX_TOKENS
    # the same groups with prompts that fit are trained on: the peer's answer is trusted
    fitting = tuple(group.replace(prompt_ids=group.prompt_ids[:8]) for group in groups)
    publish(hub, node, "mallory", dataclasses.replace(batch, round=1, groups=fitting))
    assert node.run_round().step.peer_groups == 2


def test_scoring_stops_inside_a_group_when_the_time_is_spent():
    # One group of 40 completions, each as slow to check as math_verify on a hard answer (50 ms): 2 s of scoring
    # for one group, against a budget of 0.2 s.
    hub = MemoryHub()
    node = node_on(hub, mix={"max_scoring_s": 0.2})

    class SlowTask(DigitTask):
        def reward(self, completion_text: str, gold: str) -> float:
            if gold == "3":
                time.sleep(0.05)
            return super().reward(completion_text, gold)

    node.task = node.intake.task = SlowTask()
    publish(hub, node, "slow", peer_batch(node, "slow", groups=1, size=40, length=3, first_index=3))
    report = node.run_round()
    assert report.seconds["score_peers"] < 0.2 + 0.05 + 0.3
    assert report.unscored_groups == 1
