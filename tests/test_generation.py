"""Generation: the generator contract, and sampler log-probs that mean what docs/loss.md says.

Run: python -m pytest tests/test_generation.py -q

The key check: every sampler log-prob a backend returns equals a teacher-forced recompute by the same
model on prompt + completion, one sequence alone with no padding and no cache, under the same
processing (log_softmax of logits / T with the same top-k / top-p mask).

The contract tests run for every backend this machine has (the ``backend`` fixture): the transformers
backend; the vLLM backend against ``helpers/vllm_stand_in.py`` (vLLM's API surface, sampling on the CPU), so the
request it builds and the outputs it reads are checked everywhere; and the vLLM backend against the real
vLLM where vLLM and a GPU are present. vLLM-specific behaviour (weight sync, LoRA ids) is in
``test_generation_vllm.py``.

The model is a tiny random Llama built here (no download, no dependency on the built-in models), with
a wide initialisation so its next-token distributions are far from uniform (temperature then matters)
and with attention dropout, so a generator that forgot eval mode would not match the recompute.
Prompts are token id arrays: no tokenizer is needed.
"""

import subprocess
import sys
import typing
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from helpers import vllm_stand_in
from helpers.real_vllm import open_engine, real_vllm_runs_here
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from ftis.node.generation import GENERATORS, FakeGenerator, GeneratedCompletion, Generator, make_generator
from ftis.node.generation.draws import processed_logprobs
from ftis.node.generation.fake import _processed_logprobs as fake_processed_logprobs
from ftis.node.generation.hf import TransformersGenerator, greedy
from ftis.node.generation.types import stop_token_ids
from ftis.node.trainer.groups import TrainingGroup
from ftis.node.trainer.logprobs import completion_logprobs
from ftis.node.trainer.packing import pack
from ftis.protocol import (
    Group,
    PolicyInfo,
    RolloutBatch,
    SamplingSettings,
    TaskRef,
    TokenizerInfo,
    decode,
    encode,
)

VOCAB, EOS, PAD = 40, 2, 0
# Lengths 1 to 9, so left padding, a one-token prompt and chunks that cut groups apart are all exercised.
PROMPTS = [np.array([1, 5, 6, 7]), np.array([9]), np.array([1, 3, 4, 5, 6, 7, 8, 9, 10]), np.array([1, 11, 12])]
G = 4
BATCH_SIZE = 5  # 16 rows → chunks of 5, 5, 5, 1: a prompt's G copies straddle chunks


@pytest.fixture(scope="module")
def model() -> LlamaForCausalLM:
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128, initializer_range=0.2, attention_dropout=0.1,
        bos_token_id=1, eos_token_id=EOS, pad_token_id=PAD,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.train()  # as a trainer leaves it: generation must switch to eval mode and back
    return model


# Tolerances of the recompute checks, per backend (see TOLERANCE below for the transformers one). The real
# vLLM runs float32 here too, but with GPU kernels against a CPU recompute: not yet measured, so 1e-3, the
# wire's own precision.
REAL_VLLM_TOLERANCE = 1e-3


@dataclass
class Backend:
    """A backend under test: how to build its generator for ``model`` (the weights the recompute uses)."""

    name: str
    model: LlamaForCausalLM
    tolerance: float
    monkeypatch: pytest.MonkeyPatch

    def make(self, **kwargs) -> Generator:
        if self.name == "transformers":
            return TransformersGenerator(self.model, batch_size=BATCH_SIZE, **kwargs)
        from ftis.node.config import VllmConfig
        from ftis.node.generation.vllm_backend import VllmGenerator
        from ftis.node.models import build_tokenizer
        from ftis.node.models.loading import Policy

        if self.name == "vllm-stand-in":
            vllm_stand_in.install(self.monkeypatch)
        policy = Policy(self.model, build_tokenizer(), "test-llama", "full", "test")  # the tokenizer is only saved
        settings = VllmConfig(dtype="float32", enforce_eager=True, gpu_memory_utilization=0.2)
        if self.name == "vllm":
            return open_engine(self.monkeypatch, lambda: VllmGenerator(policy, settings, **kwargs))
        return VllmGenerator(policy, settings, **kwargs)


def _available_backends() -> list[str]:
    found = ["transformers", "vllm-stand-in"]
    if real_vllm_runs_here():
        found.append("vllm")
    return found


@pytest.fixture(scope="module")
def servable_model(model) -> LlamaForCausalLM:
    """The test model with 64-wide attention heads: vLLM's attention kernels take no 8-wide ones."""
    torch.manual_seed(0)
    wide = LlamaForCausalLM(LlamaConfig(**{**model.config.to_dict(), "head_dim": 64}))
    wide.train()
    return wide


@pytest.fixture(params=_available_backends())
def backend(request, model, monkeypatch) -> Backend:
    if request.param == "vllm":
        return Backend("vllm", request.getfixturevalue("servable_model"), REAL_VLLM_TOLERANCE, monkeypatch)
    return Backend(request.param, model, TOLERANCE, monkeypatch)


def generate(backend: Backend, sampling: SamplingSettings, seed: int | None = 1,
             **kwargs) -> list[list[GeneratedCompletion]]:
    return backend.make(**kwargs).generate(PROMPTS, G, sampling, seed=seed)


def teacher_forced_logits(model, prompt: np.ndarray, completion: np.ndarray) -> torch.Tensor:
    """(n, V) logits predicting each completion token: one unpadded sequence, full forward, no cache."""
    ids = torch.as_tensor(np.concatenate([prompt, completion]))[None]  # (1, p + n)
    model.eval()
    try:
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0]  # (p + n, V)
    finally:
        model.train()
    return logits[len(prompt) - 1 : -1]  # position t predicts token t + 1


def recompute_gap(model, groups, temperature: float, top_k: int = 0, top_p: float = 1.0) -> float:
    """Max |sampler log-prob − recomputed log-prob| over every token of ``groups``."""
    worst = 0.0
    for prompt, group in zip(PROMPTS, groups, strict=True):
        for c in group:
            logits = teacher_forced_logits(model, prompt, c.token_ids)
            recomputed = processed_logprobs(logits, temperature, top_k, top_p)  # (n, V)
            token_logprobs = recomputed.gather(-1, torch.as_tensor(c.token_ids)[:, None]).squeeze(-1)
            worst = max(worst, (token_logprobs - torch.as_tensor(c.sampler_logprobs)).abs().max().item())
    return worst


def all_completions(groups) -> list[GeneratedCompletion]:
    return [c for group in groups for c in group]


# --- the contract -----------------------------------------------------------------------------------------


def test_one_group_of_g_per_prompt_with_well_formed_completions(backend):
    groups = generate(backend, SamplingSettings(1.0, 1.0, 0, 12))
    assert len(groups) == len(PROMPTS) and all(len(group) == G for group in groups)
    for c in all_completions(groups):
        assert c.token_ids.dtype == np.int64 and c.sampler_logprobs.dtype == np.float32
        assert c.token_ids.shape == c.sampler_logprobs.shape and 1 <= c.num_tokens <= 12
        assert ((c.token_ids >= 0) & (c.token_ids < VOCAB)).all()
        assert np.isfinite(c.sampler_logprobs).all() and (c.sampler_logprobs <= 0).all()


@pytest.mark.parametrize("eos_ids", [(EOS,), (EOS, 3)], ids=["one-eos", "two-eos"])
def test_completions_stop_at_eos_or_at_max_new_tokens(backend, eos_ids):
    max_new = 10
    groups = generate(backend, SamplingSettings(1.0, 1.0, 0, max_new), eos_token_ids=list(eos_ids))
    completions = all_completions(groups)
    for c in completions:
        is_eos = np.isin(c.token_ids, eos_ids)
        assert not is_eos[:-1].any(), "no token after an end-of-sequence token is returned"
        if c.finish_reason == "stop":
            assert is_eos[-1]
        else:
            assert c.finish_reason == "length" and c.num_tokens == max_new and not is_eos[-1]
    # With this seed both endings occur, so both branches above were checked.
    assert {c.finish_reason for c in completions} == {"stop", "length"}


def test_the_same_seed_gives_the_same_completions(backend):
    sampling = SamplingSettings(0.9, 0.95, 0, 12)
    first, again, other = (all_completions(generate(backend, sampling, seed=s)) for s in (7, 7, 8))
    assert all(np.array_equal(a.token_ids, b.token_ids) for a, b in zip(first, again, strict=True))
    assert all(np.array_equal(a.sampler_logprobs, b.sampler_logprobs) for a, b in zip(first, again, strict=True))
    assert [a.finish_reason for a in first] == [b.finish_reason for b in again]
    assert any(not np.array_equal(a.token_ids, b.token_ids) for a, b in zip(first, other, strict=True))


def test_the_policy_version_changes_only_through_sync_weights(backend):
    generator = backend.make()
    assert generator.policy_version == 0
    with pytest.raises(AttributeError):
        generator.policy_version = 1  # type: ignore[misc]  # a read-only property: syncing is a call
    generator.sync_weights(3)
    assert generator.policy_version == 3
    assert all(len(group) == G for group in generator.generate(PROMPTS, G, SamplingSettings(1.0, 1.0, 0, 4)))


def test_generation_runs_in_eval_mode_and_restores_every_module(model):
    frozen = model.model.layers[0]
    frozen.eval()  # a trainer may keep some submodules in eval mode: they must stay so
    before = {name: m.training for name, m in model.named_modules()}
    try:
        TransformersGenerator(model, batch_size=BATCH_SIZE).generate(PROMPTS, G, SamplingSettings(1.0, 1.0, 0, 4))
        assert {name: m.training for name, m in model.named_modules()} == before
        assert model.training and not frozen.training
    finally:
        model.train()


@pytest.mark.parametrize(
    "sampling", [SamplingSettings(0.0, 1.0, 0, 4), SamplingSettings(1.0, 0.0, 0, 4),
                 SamplingSettings(1.0, 1.0, -1, 4), SamplingSettings(1.0, 1.0, 0, 0)],
    ids=["temperature-0", "top_p-0", "top_k-negative", "no-new-tokens"],
)  # fmt: skip
def test_impossible_requests_are_refused(backend, sampling):
    with pytest.raises(ValueError):
        backend.make().generate(PROMPTS, G, sampling)


def test_empty_prompts_and_empty_groups_are_refused(backend):
    generator = backend.make()
    with pytest.raises(ValueError, match="prompts"):
        generator.generate([np.array([], np.int64)], G, SamplingSettings(1.0, 1.0, 0, 4))
    with pytest.raises(ValueError, match="num_completions"):
        generator.generate(PROMPTS, 0, SamplingSettings(1.0, 1.0, 0, 4))


# --- sampler log-probs against a teacher-forced recompute ---------------------------------------------------
# Tolerance: both sides are float32 on CPU with the same weights, so they differ only by rounding — the
# batched side runs left-padded rows through a KV cache one token at a time, the recompute runs one
# unpadded sequence in one pass, so matmuls and softmaxes reduce in other orders and shapes. Float32
# rounding in a 2-layer model with logits of a few units gives ~1e-6 on a logit, a few e-6 on a
# log-prob, scaled by 1/T. Measured here (torch 2.13 CPU, one thread): 1.9e-6 at T = 1, 2.6e-6 at T = 0.7,
# 1.9e-6 at T = 0.7 with top-p 0.8, 2.6e-6 at T = 1 with top-p 0.9, 1.3e-6 at T = 1.3 with top-k 5 and
# top-p 0.9. 1e-4 leaves a wide margin for other CPUs' kernels and thread counts, and
# is still ten times below the wire's quantisation error (2^-10 ≈ 1e-3), the precision the IS weight needs.
# (A token on a top-p boundary within rounding of top_p could flip the mask; at these seeds none does.)
TOLERANCE = 1e-4


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingSettings(1.0, 1.0, 0, 16),
        SamplingSettings(0.7, 1.0, 0, 16),
        SamplingSettings(0.7, 0.8, 0, 16),
        SamplingSettings(1.0, 0.9, 0, 16),
        SamplingSettings(1.3, 0.9, 5, 16),
    ],
    ids=["T1", "T0.7", "T0.7-top_p0.8", "T1-top_p0.9", "T1.3-top_k5-top_p0.9"],
)
def test_sampler_logprobs_match_a_teacher_forced_recompute(backend, sampling):
    groups = generate(backend, sampling)
    gap = recompute_gap(backend.model, groups, sampling.temperature, sampling.top_k, sampling.top_p)
    print(f"{backend.name}: max |sampler - recompute| at {sampling}: {gap:.2e}")
    assert gap <= backend.tolerance


def test_at_t1_without_truncation_they_are_the_trainers_plain_log_softmax(backend):
    """What the trainer computes for old_logprobs is log_softmax(logits): at T = 1 with no top-k/top-p
    that is exactly the sampler's distribution, so the IS weight starts at 1 on a node's own samples."""
    model = backend.model
    groups = generate(backend, SamplingSettings(1.0, 1.0, 0, 16))
    for prompt, group in zip(PROMPTS, groups, strict=True):
        for c in group:
            plain = teacher_forced_logits(model, prompt, c.token_ids).log_softmax(-1)
            plain = plain.gather(-1, torch.as_tensor(c.token_ids)[:, None]).squeeze(-1)
            assert (plain - torch.as_tensor(c.sampler_logprobs)).abs().max().item() <= backend.tolerance


def test_at_another_temperature_they_differ_from_the_unscaled_recompute(backend):
    """So a caller must recompute with the generator's temperature (the batch carries it) — or knowingly
    compare against the unscaled policy."""
    groups = generate(backend, SamplingSettings(0.7, 1.0, 0, 16))
    assert recompute_gap(backend.model, groups, temperature=0.7) <= backend.tolerance
    assert recompute_gap(backend.model, groups, temperature=1.0) > 0.1


# --- the processing itself --------------------------------------------------------------------------------


def naive_processed_logprobs(row: list[float], temperature: float, top_k: int, top_p: float) -> list[float]:
    """One distribution, the obvious way: sort, keep, renormalise."""
    scores = [x / temperature for x in row]
    ranked = sorted(range(len(scores)), key=lambda i: -scores[i])
    keep = set(ranked)
    if top_k > 0:
        kth = scores[ranked[min(top_k, len(scores)) - 1]]
        keep = {i for i in keep if scores[i] >= kth}
    if top_p < 1:
        total = sum(np.exp(scores[i]) for i in keep)
        kept, mass = set(), 0.0
        for i in (i for i in ranked if i in keep):
            if mass >= top_p:
                break
            kept.add(i)
            mass += np.exp(scores[i]) / total
        keep = kept
    log_total = np.log(sum(np.exp(scores[i]) for i in keep))
    return [scores[i] - log_total if i in keep else -np.inf for i in range(len(scores))]


def test_processing_by_hand():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    inf = float("-inf")
    # top_p 0.7: 0.5 alone is short of it, 0.5 + 0.3 reaches it → two tokens, renormalised to 5/8, 3/8.
    expected = torch.log(torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    torch.testing.assert_close(processed_logprobs(logits, 1.0, top_p=0.7), expected)
    # top_p 0.9: 0.8 is short, 0.95 reaches it → three tokens.
    assert torch.isinf(processed_logprobs(logits, 1.0, top_p=0.9)).tolist() == [[False, False, False, True]]
    # top_k 1 keeps the argmax, with log-prob 0.
    assert processed_logprobs(logits, 1.0, top_k=1).tolist() == [[0.0, inf, inf, inf]]
    # top_k keeps ties with the k-th.
    tied = torch.tensor([[2.0, 1.0, 1.0, 0.0]])
    assert torch.isinf(processed_logprobs(tied, 1.0, top_k=2)).tolist() == [[False, False, False, True]]
    # top_k ≥ V and top_k = 0 are off; temperature scales before the softmax.
    torch.testing.assert_close(processed_logprobs(logits, 1.0, top_k=4), logits.log_softmax(-1))
    torch.testing.assert_close(processed_logprobs(logits, 0.5), (logits / 0.5).log_softmax(-1))
    with pytest.raises(ValueError):
        processed_logprobs(logits, 0.0)


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 0.6), (0.7, 3, 1.0), (1.5, 6, 0.85), (0.5, 0, 0.95)])
def test_processing_matches_the_naive_one(temperature, top_k, top_p):
    logits = torch.randn(8, 12, generator=torch.Generator().manual_seed(3), dtype=torch.float64) * 2
    fast = processed_logprobs(logits, temperature, top_k, top_p)
    for row, fast_row in zip(logits.tolist(), fast.tolist(), strict=True):
        slow = naive_processed_logprobs(row, temperature, top_k, top_p)
        np.testing.assert_allclose(fast_row, slow, rtol=0, atol=1e-5)
    # The fake generator's NumPy twin agrees too.
    for row, fast_row in zip(logits.numpy(), fast.numpy(), strict=True):
        twin = fake_processed_logprobs(row, SamplingSettings(temperature, top_p, top_k, 1))
        np.testing.assert_allclose(twin, fast_row, rtol=0, atol=1e-5)


class FixedLogits(torch.nn.Module):
    """A 'model' whose next-token logits are always ``logits``: the draws' frequencies can then be
    compared with the processed distribution directly. Implements only the forward surface the
    sampling loop uses."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.logits = torch.nn.Parameter(logits, requires_grad=False)

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=None):
        B, T = input_ids.shape
        return type("Out", (), {"logits": self.logits.expand(B, T, -1)})()


@pytest.mark.parametrize(("top_p", "top_k", "on_policy"), [(1.0, 0, True), (0.9, 0, False), (1.0, 5, False)])
def test_own_samples_are_on_policy_for_the_trainer_only_without_top_k_and_top_p(model, top_p, top_k, on_policy):
    # The trainer's π_θ is the model at the temperature alone; the sampler records π_gen, what it drew from.
    generator = TransformersGenerator(model, eos_token_ids=EOS, pad_token_id=PAD, batch_size=16)
    prompts = [np.array([1, 5, 6]), np.array([1, 7])]
    groups = generator.generate(prompts, 8, SamplingSettings(0.9, top_p, top_k, 6), seed=3)
    columns = [Group("g", TaskRef("t", "train", 0, ""), prompt, tuple(c.to_completion(0.0) for c in group)).columns
               for prompt, group in zip(prompts, groups, strict=True)]
    training = [TrainingGroup(f"g{k}", "me", prompt, cols, np.zeros(8), False, 0.9)
                for k, (prompt, cols) in enumerate(zip(prompts, columns, strict=True))]
    packed = pack(training, PAD)
    training_mode = model.training
    with torch.no_grad():
        trained = completion_logprobs(model.eval(), packed)[packed.loss_mask]
    model.train(training_mode)  # the module's model stays as the other tests expect it
    sampled = packed.sampler_logprobs[packed.loss_mask]
    weights = torch.exp(trained - sampled)  # π_θ / π_gen per token: the TIS weight before truncation
    if on_policy:
        assert torch.allclose(weights, torch.ones_like(weights), atol=1e-3)
    else:
        assert float(weights.max()) <= 1 + 1e-4 and float(weights.mean()) < 0.99  # a truncation: π_gen ≥ π_θ


def test_tokens_are_drawn_from_the_processed_distribution():
    logits = torch.tensor([0.0, 2.0, 1.5, 1.0, 0.5, -1.0, -3.0, 0.2])
    sampling = SamplingSettings(0.8, 0.9, 6, 1)
    n = 20_000
    generator = TransformersGenerator(FixedLogits(logits), eos_token_ids=0, batch_size=n)
    (group,) = generator.generate([np.array([1])], n, sampling, seed=0)
    drawn = np.array([c.token_ids[0] for c in group])
    expected = processed_logprobs(logits, sampling.temperature, sampling.top_k, sampling.top_p).exp().numpy()
    frequencies = np.bincount(drawn, minlength=len(logits)) / n
    assert (frequencies[expected == 0] == 0).all(), "a masked token was drawn"
    sigma = np.sqrt(expected * (1 - expected) / n)
    assert (np.abs(frequencies - expected) <= 5 * sigma + 1e-12).all()


def test_the_transformers_backend_stops_at_every_end_of_sequence_id_the_model_names_as_vllm_does():
    # An instruct model's generation config lists several (Qwen2.5-Instruct: <|im_end|> and <|endoftext|>); the
    # node passes the tokenizer's one. Token 4 is certain here and is the config's second end of sequence.
    logits = torch.full((8,), -30.0)
    logits[4] = 10.0
    model = FixedLogits(logits)
    model.generation_config = GenerationConfig(eos_token_id=[0, 4])
    generator = TransformersGenerator(model, eos_token_ids=0, batch_size=4)
    (group,) = generator.generate([np.array([1])], 3, SamplingSettings(1.0, 1.0, 0, 6), seed=0)
    assert [(c.token_ids.tolist(), c.finish_reason) for c in group] == [([4], "stop")] * 3
    assert stop_token_ids(model, 0) == {0, 4}  # what the vLLM backend stops at


# --- greedy evaluation --------------------------------------------------------------------------------


def test_greedy_is_the_step_by_step_argmax(model):
    max_new = 8
    out = greedy(model, PROMPTS, max_new, batch_size=3)
    assert model.training
    for prompt, c in zip(PROMPTS, out, strict=True):
        ids = list(prompt)
        for _ in range(max_new):  # the obvious way: a full forward per token, no cache, no padding
            model.eval()
            with torch.no_grad():
                ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
            model.train()
            if ids[-1] == EOS:
                break
        assert c.token_ids.tolist() == ids[len(prompt) :]
        assert c.finish_reason == ("stop" if ids[-1] == EOS else "length")
        assert (c.sampler_logprobs == 0).all()


# --- the table and the fake ------------------------------------------------------------------------------


def test_make_generator_builds_each_named_backend_from_a_policy_and_the_settings(model, monkeypatch):
    from ftis.node.config import GenerationConfig
    from ftis.node.generation.vllm_backend import VllmGenerator
    from ftis.node.models import build_tokenizer
    from ftis.node.models.loading import Policy

    policy = Policy(model, build_tokenizer(), "test-llama", "full", "test")  # a tokenizer of 105 ids, EOS 2
    settings = GenerationConfig(batch_size=3, vllm={"gpu_memory_utilization": 0.2})
    assert set(GENERATORS) == {"transformers", "vllm", "fake"}
    # A config file chooses among the real backends; every one it can name is in the table.
    assert set(typing.get_args(GenerationConfig.model_fields["backend"].annotation)) == {"transformers", "vllm"}
    built = make_generator("transformers", policy, settings)
    assert isinstance(built, TransformersGenerator) and built.model is model and built.batch_size == 3
    assert (built.eos_token_ids, built.pad_token_id, built.policy_version) == (EOS, PAD, 0)
    fake = make_generator("fake", policy, settings, seed=4)
    assert isinstance(fake, FakeGenerator)
    assert (fake.vocab_size, fake.eos_token_id) == (VOCAB, EOS)  # ids the model's embeddings have, too
    stand_in = vllm_stand_in.install(monkeypatch)
    engine = make_generator("vllm", policy, settings, seed=4)
    assert isinstance(engine, VllmGenerator)
    assert stand_in.LLM.instances[0].options["gpu_memory_utilization"] == 0.2
    assert stand_in.LLM.instances[0].options["seed"] == 4
    with pytest.raises(ValueError, match="unknown generator"):
        make_generator("vllm-typo", policy, settings)


def test_a_node_runs_its_rounds_on_the_fake_backend():
    from helpers.nodes import LIMITS, DigitTask, node_config

    from ftis.node.models import load_policy
    from ftis.node.runner.node import Node
    from ftis.node.swarm.memory import MemoryHub, MemoryTransport

    config = node_config()
    policy = load_policy("tiny-small", seed=0)
    generator = make_generator("fake", policy, config.generation)
    node = Node(config, policy, DigitTask(), generator,
                MemoryTransport(MemoryHub(), config.swarm.run_id, "a", policy.fingerprint, LIMITS))
    reports = [node.run_round() for _ in range(2)]
    assert all(report.own_groups == config.generation.prompts_per_round for report in reports)
    assert generator.policy_version == node.trainer.policy_version == sum(r.step.trained for r in reports)


def test_importing_the_package_does_not_import_torch():
    code = "import sys, ftis.node.generation; assert 'torch' not in sys.modules, 'torch was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_fake_generator_samples_its_documented_policy():
    fake = FakeGenerator(vocab_size=50, eos_token_id=3, mean_length=8, policy_seed=1)
    sampling = SamplingSettings(0.9, 0.95, 0, 30)
    groups = fake.generate(PROMPTS, 16, sampling, seed=4)
    assert [len(g) for g in groups] == [16] * len(PROMPTS)
    policy = fake_processed_logprobs(fake.logits, sampling)
    for c in all_completions(groups):
        assert c.token_ids.dtype == np.int64 and c.sampler_logprobs.dtype == np.float32
        assert np.isfinite(c.sampler_logprobs).all() and (c.sampler_logprobs <= 0).all()
        np.testing.assert_array_equal(c.sampler_logprobs, policy[c.token_ids].astype(np.float32))
        assert not (c.token_ids[:-1] == 3).any()
        assert (c.token_ids[-1] == 3) == (c.finish_reason == "stop")
        assert c.finish_reason == "stop" or c.num_tokens == 30
    again = fake.generate(PROMPTS, 16, sampling, seed=4)
    assert all(np.array_equal(a.token_ids, b.token_ids) for a, b in
               zip(all_completions(groups), all_completions(again), strict=True))  # fmt: skip
    # A group does not depend on the prompts after it.
    (first,) = fake.generate(PROMPTS[:1], 16, sampling, seed=4)
    assert all(np.array_equal(a.token_ids, b.token_ids) for a, b in zip(first, groups[0], strict=True))


def test_the_fake_generators_version_is_synced_not_set():
    fake = FakeGenerator(vocab_size=VOCAB, eos_token_id=EOS, policy_version=3)
    with pytest.raises(AttributeError):
        fake.policy_version = 4  # type: ignore[misc]
    before = fake.generate(PROMPTS, G, SamplingSettings(1.0, 1.0, 0, 8), seed=2)
    fake.sync_weights(4)
    after = fake.generate(PROMPTS, G, SamplingSettings(1.0, 1.0, 0, 8), seed=2)
    assert fake.policy_version == 4  # ...and its fixed policy samples as before
    assert all(np.array_equal(a.token_ids, b.token_ids)
               for a, b in zip(all_completions(before), all_completions(after), strict=True))


def test_the_fake_generators_output_encodes_as_a_rollout_batch():
    fake = FakeGenerator(vocab_size=VOCAB, eos_token_id=EOS, policy_version=3)
    sampling = SamplingSettings(1.0, 1.0, 0, 24)
    generated = fake.generate(PROMPTS, G, sampling, seed=0)
    groups = tuple(
        Group(f"g{i}", TaskRef("arith", "train", i, "4"), prompt, tuple(c.to_completion(0.0) for c in completions))
        for i, (prompt, completions) in enumerate(zip(PROMPTS, generated, strict=True))
    )
    batch = RolloutBatch(
        run_id="run", peer_id="peer", round=0, created_at=1_700_000_000.0,
        policy=PolicyInfo("fake", "", "full", fake.policy_version), tokenizer=TokenizerInfo("fp", VOCAB),
        sampling=sampling, groups=groups,
    )  # fmt: skip
    back = decode(encode(batch))
    assert back.sampling == sampling and back.num_completions == len(PROMPTS) * G
    for sent, received in zip(groups, back.groups, strict=True):
        for a, b in zip(sent.completions, received.completions, strict=True):
            np.testing.assert_array_equal(a.token_ids, b.token_ids)
            np.testing.assert_allclose(a.sampler_logprobs, b.sampler_logprobs, rtol=0, atol=2.0**-10)


def test_completions_end_at_the_token_that_completes_a_stop_string(backend):
    # Stop strings (``[generation] stop``): every backend ends a completion at the first token whose text completes
    # one, keeps that token, and calls it a stop; the log-probs of what it keeps are still the sampler's.
    from ftis.node.generation.stops import StopStrings
    from ftis.node.models import build_tokenizer

    tokenizer = build_tokenizer()
    stop = StopStrings(tokenizer, [tokenizer.decode([7]), tokenizer.decode([8]), tokenizer.decode([10, 11])])
    sampling = SamplingSettings(1.0, 1.0, 0, 16)
    groups = generate(backend, sampling, stop=stop)
    cut = 0
    for completion in all_completions(groups):
        ids = completion.token_ids
        ends = stop.cut(ids)
        if completion.finish_reason == "stop" and ids[-1] != EOS:
            assert ends == len(ids)  # ended by a stop string, at the token that completed it
            cut += 1
        else:
            assert ends is None  # no stop string anywhere in what it kept
    assert cut >= 3, "the stop strings were never met: the test needs them to be"
    assert recompute_gap(backend.model, groups, temperature=1.0) < backend.tolerance


def test_prompts_sharing_a_prefix_give_what_each_gives_alone(model):
    # The prefill computes a shared prefix once (an instruction and solved examples, a group's G copies) and copies
    # its cache to every row: each row must still see exactly its own prompt, at its own positions.
    rng = np.random.default_rng(5)
    prefix = rng.integers(3, VOCAB, size=14)
    prompts = [np.concatenate([prefix, rng.integers(3, VOCAB, size=n)]) for n in (1, 4, 2, 7, 3)]
    together = greedy(model, prompts, 8, batch_size=5)
    for prompt, c in zip(prompts, together, strict=True):
        [alone] = greedy(model, [prompt], 8, batch_size=1)  # one row: no prefix is shared
        assert c.token_ids.tolist() == alone.token_ids.tolist()
    sampled = TransformersGenerator(model, batch_size=5).generate(prompts, 2, SamplingSettings(1.0, 1.0, 0, 8), seed=3)
    worst = 0.0
    for prompt, group in zip(prompts, sampled, strict=True):
        for c in group:
            logits = teacher_forced_logits(model, prompt, c.token_ids)
            recomputed = processed_logprobs(logits, 1.0).gather(-1, torch.as_tensor(c.token_ids)[:, None]).squeeze(-1)
            worst = max(worst, (recomputed - torch.as_tensor(c.sampler_logprobs)).abs().max().item())
    assert worst < TOLERANCE


@pytest.mark.parametrize("window", [64, 4], ids=["window-past-everything", "window-of-4"])
def test_repeated_prompts_and_a_sliding_window_give_what_each_prompt_gives_alone(window):
    # Each distinct prompt is prefilled once and copied to its G rows, after the prefix they share. A sliding
    # window counts cache slots, so the padding between that prefix and a shorter prompt's own tokens would hide
    # real tokens from it: a window shorter than the sequence prefills each prompt whole.
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    model = Gemma3ForCausalLM(Gemma3TextConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, sliding_window=window, max_position_embeddings=128, eos_token_id=EOS,
        layer_types=["sliding_attention", "sliding_attention", "full_attention"]))  # fmt: skip
    rng = np.random.default_rng(8)
    prefix = rng.integers(3, VOCAB, size=12)
    prompts = [np.concatenate([prefix, rng.integers(3, VOCAB, size=n)]) for n in (1, 6, 3)]
    sampled = TransformersGenerator(model, batch_size=6).generate(prompts, 2, SamplingSettings(1.0, 1.0, 0, 8), seed=4)
    worst = 0.0
    for prompt, group in zip(prompts, sampled, strict=True):
        for c in group:
            logits = teacher_forced_logits(model, prompt, c.token_ids)
            recomputed = processed_logprobs(logits, 1.0).gather(-1, torch.as_tensor(c.token_ids)[:, None]).squeeze(-1)
            worst = max(worst, (recomputed - torch.as_tensor(c.sampler_logprobs)).abs().max().item())
    assert worst < TOLERANCE


def test_each_distinct_prompt_is_prefilled_once(model):
    # A group's G copies of its prompt are one row of the prefill; decoding then runs every row.
    shapes: list[tuple[int, int]] = []
    hook = model.register_forward_pre_hook(lambda _, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)),
                                           with_kwargs=True)
    try:
        TransformersGenerator(model, batch_size=64).generate(PROMPTS, G, SamplingSettings(1.0, 1.0, 0, 4), seed=0)
    finally:
        hook.remove()
    assert shapes[0] == (len(PROMPTS), max(len(p) for p in PROMPTS))  # these prompts share no prefix
    assert all(rows == len(PROMPTS) * G and width == 1 for rows, width in shapes[1:])


@pytest.mark.parametrize("block", [4, 3], ids=["blocks-and-a-short-one", "three-entry-blocks"])
def test_the_two_step_draw_gives_each_token_its_share_and_its_log_prob(monkeypatch, block):
    # A vocabulary larger than the draw's block: a block by the blocks' sums, then a token within it. The mass sits
    # in several blocks, the short last one included, with masked tokens (top-k) and a temperature.
    import ftis.node.generation.draws as draws

    monkeypatch.setattr(draws, "DRAW_BLOCK", block)
    logits = torch.tensor([0.0, 2.0, 1.5, -9.0, 1.0, 0.5, -1.0, -3.0, 0.2, 1.8])  # 10 words: blocks of 4, 4 and 2
    sampling = SamplingSettings(0.8, 1.0, 7, 1)
    n = 40_000
    tokens, logprobs = draws.sampling_pick(sampling, torch.Generator().manual_seed(0))(logits.repeat(n, 1))
    expected = processed_logprobs(logits, sampling.temperature, sampling.top_k, sampling.top_p)
    frequencies = np.bincount(tokens.numpy(), minlength=len(logits)) / n
    p = expected.exp().numpy()
    assert (frequencies[p == 0] == 0).all(), "a masked token was drawn"
    assert (np.abs(frequencies - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-12).all()
    torch.testing.assert_close(logprobs, expected[tokens], rtol=0, atol=1e-6)
