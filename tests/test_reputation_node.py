"""Peer scores inside a node: the trainer counts each peer's divergence-filtered completions, and a node
on the in-memory transport mutes a peer whose log-probs are made up while an honest peer keeps its score.

Run: python -m pytest tests/test_reputation_node.py -q
"""

from dataclasses import replace

import numpy as np
import torch
from helpers.nodes import make_node

from ftis.node.config import LossConfig, TrainerConfig
from ftis.node.models import load_policy
from ftis.node.records.display import summary_line
from ftis.node.records.metrics import report_record
from ftis.node.swarm.exchange.reasons import MUTED, NONFINITE
from ftis.node.swarm.memory import MemoryHub
from ftis.node.swarm.transport import Transport
from ftis.node.trainer.groups import TrainingGroup
from ftis.node.trainer.logprobs import completion_logprobs
from ftis.node.trainer.packing import pack
from ftis.node.trainer.step_figures import PeerFiltered
from ftis.node.trainer.trainer import Trainer
from ftis.protocol import RolloutBatch
from ftis.protocol.limits import MIN_LOGPROB
from ftis.protocol.schema import CompletionColumns


def group(peer: str, rewards: list[float], logprobs: str, policy, off_policy: bool = True) -> TrainingGroup:
    """Four 3-token completions of one prompt; ``logprobs`` "zero" (made up) or "true" (the model's own)."""
    rng = np.random.default_rng(len(peer) + len(rewards))
    lengths = np.full(len(rewards), 3, np.int64)
    ids = rng.integers(1, len(policy.tokenizer), int(lengths.sum()))
    columns = CompletionColumns(ids, np.zeros(len(ids), np.float32), lengths, np.zeros(len(rewards)),
                                tuple("stop" for _ in rewards))
    built = TrainingGroup(f"{peer}/0", peer, rng.integers(1, 50, 4), columns, np.array(rewards), off_policy, 1.0)
    if logprobs == "true":
        with torch.no_grad():
            packed = pack([built])
            own = completion_logprobs(policy.model, packed)[packed.loss_mask].numpy()
        built = replace(built, completions=replace(columns, sampler_logprobs=own.astype(np.float32)))
    return built


def test_the_trainer_counts_each_peers_judged_and_divergence_filtered_completions():
    policy = load_policy("tiny-small", seed=0)
    trainer = Trainer(policy.model, "full", LossConfig(divergence_threshold=10.0), TrainerConfig(learning_rate=1e-3))
    groups = [
        group("me", [1, 0, 1, 0], "true", policy, off_policy=False),  # own fresh samples: never filtered
        group("honest", [1, 0, 0, 1], "true", policy),  # D = 0: kept (or dropped for Â ≤ 0 only)
        group("garbage", [0, 1, 1, 0], "zero", policy),  # log-prob 0 claimed on every token: D ≫ g
        group("garbage", [1, 1, 1, 1], "zero", policy),  # no reward variance: not trained, not judged
    ]
    step = trainer.step(groups)
    assert step.trained
    # two right answers of four each (positive Â): what the step would teach; neither text implausible (no check)
    assert step.filtered_by_peer == {"honest": PeerFiltered(4, 0, 2, 0), "garbage": PeerFiltered(4, 4, 2, 0)}


class Claims:
    """A node's transport that publishes its batches claiming ``logprob`` on every token: a forger."""

    def __init__(self, inner: Transport, logprob: float):
        self._inner, self._logprob = inner, logprob

    def publish(self, batch: RolloutBatch):
        groups = tuple(g.replace(completions=tuple(
            replace(c, sampler_logprobs=np.full_like(c.sampler_logprobs, self._logprob)) for c in g.completions))
            for g in batch.groups)
        return self._inner.publish(replace(batch, groups=groups))

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def test_a_node_mutes_a_peer_with_made_up_logprobs_and_keeps_an_honest_peers_score():
    hub = MemoryHub()
    settings = dict(loss={"divergence_threshold": 10.0}, trainer={"learning_rate": 1e-3})
    receiver = make_node(hub, "receiver", **settings)
    honest = make_node(hub, "honest", **settings)  # the receiver's model and seed: its log-probs agree
    forger = make_node(hub, "forger", seed=1, **settings)
    forger.transport = Claims(forger.transport, 0.0)  # log-prob 0 on every token
    reports = []
    for _ in range(4):  # every batch of the forger is divergence-filtered: muted after its second
        honest.run_round()
        forger.run_round()
        reports.append(receiver.run_round())
    judged = {peer: [r.step.filtered_by_peer.get(peer) for r in reports] for peer in ("honest", "forger")}
    forged = [counts for counts in judged["forger"] if counts is not None]
    assert forged and all(counts.divergence_filtered == counts.completions for counts in forged), judged
    assert all(counts is None or counts.divergence_filtered == 0 for counts in judged["honest"]), judged
    final = reports[-1].scores
    assert final["forger"].muted_until is not None and final["forger"].score < 0.3
    assert final["honest"].muted_until is None and final["honest"].score == 1.0
    # muted: its later batches are refused unfetched, and no group of it is trained on any more
    assert reports[-1].transport.rejections[("forger", MUTED)] >= 1
    assert "forger" not in reports[-1].peer_groups_by_peer and reports[-1].peer_groups_by_peer["honest"] > 0


def test_a_step_its_peer_makes_not_finite_is_refused_the_peer_charged_and_the_node_goes_on():
    # C = ∞ (no truncation): the wire's lowest log-prob makes the TIS weight overflow, so the step is refused.
    hub = MemoryHub()
    # (tis reads no g: the helper's g goes back to its default, which a variant that does not read it may keep)
    settings = dict(loss={"variant": "tis", "clip_c": float("inf"), "divergence_threshold": 10.0},
                    trainer={"learning_rate": 1e-3})
    receiver = make_node(hub, "receiver", **settings)
    mallory = make_node(hub, "mallory", seed=1, **settings)
    mallory.transport = Claims(mallory.transport, MIN_LOGPROB)
    weights = [p.detach().clone() for p in receiver.policy.model.parameters()]
    mallory.run_round()
    refused = receiver.run_round()
    assert refused.step.refused and refused.step.nonfinite_peers == ["mallory"]
    assert refused.transport.rejections[("mallory", NONFINITE)] == 1 and refused.scores["mallory"].bad > 0
    assert all(torch.equal(a, b) for a, b in zip(weights, receiver.policy.model.parameters(), strict=True))
    assert receiver.trainer.policy_version == 0
    record = report_record(refused)
    assert record["train_refused"] and record["train_nonfinite_peers"] == ["mallory"]
    assert "STEP REFUSED" in summary_line(record)
    after = receiver.run_round()  # nothing of mallory's waits: the node trains on its own groups again
    assert after.step.trained and receiver.trainer.policy_version == 1
    assert all(torch.isfinite(p).all() for p in receiver.policy.model.parameters())
