"""The vLLM backend without a GPU: against ``helpers/vllm_stand_in.py``, vLLM's API surface with a CPU sampler.

Run: python -m pytest tests/test_generation_vllm.py -q

What is checked here (the generator contract itself runs for every backend in ``test_generation.py``):
the engine options (in-process, processed log-probs, the configured memory share and dtype, LoRA slots);
that without processed log-probs the recompute check would fail (so the option is what makes it pass);
reading vLLM's outputs, and refusing ones that cannot be vouched for; seeds; weight sync after a step —
on the explicit ``sync_weights`` call and never otherwise, full weights in place and LoRA adapters under a
new id per version, with the prefix cache reset — down to a node's rounds; a missing or too old vLLM; and
that importing the package or ``ftis-node --help`` never imports vLLM.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import logprob_check, vllm_stand_in
from helpers.nodes import LIMITS, DigitTask, make_node
from transformers import LlamaConfig, LlamaForCausalLM

from ftis.node.config import GenerationConfig, NodeConfig, VllmConfig
from ftis.node.generation import make_generator
from ftis.node.generation.types import BackendUnavailableError, WeightSyncError
from ftis.node.generation.vllm_backend import (
    VllmGenerator,
    VllmOutputError,
    request_seeds,
    stop_token_ids,
    to_generated,
)
from ftis.node.generation.vllm_engine import _version_tuple, lora_rank_slot
from ftis.node.models import build_tokenizer, load_policy
from ftis.node.models.loading import Policy
from ftis.node.runner.node import Node
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.protocol import SamplingSettings

VOCAB, EOS = 40, 2
PROMPTS = [np.array([1, 5, 6, 7]), np.array([9]), np.array([1, 11, 12])]
G = 3


@pytest.fixture
def stand_in(monkeypatch):
    return vllm_stand_in.install(monkeypatch)


def wide_policy(seed: int = 0) -> Policy:
    """A tiny Llama with a wide initialisation (temperature matters), as a full fine-tuning policy."""
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2, bos_token_id=1,
                         eos_token_id=EOS, pad_token_id=0)
    torch.manual_seed(seed)
    return Policy(LlamaForCausalLM(config).eval(), build_tokenizer(), "wide-llama", "full", "test")


def recompute_gap(model, groups, sampling: SamplingSettings) -> float:
    return logprob_check.recompute_gap(model, PROMPTS, groups, sampling)


def events(engine, kind: str) -> list[tuple]:
    return [event for event in engine.events if event[0] == kind]


# --- the engine ---------------------------------------------------------------------------------------------


def test_the_engine_runs_in_process_with_processed_logprobs_and_the_configured_share(stand_in, tmp_path):
    settings = VllmConfig(gpu_memory_utilization=0.25, max_model_len=512, max_num_batched_tokens=8192,
                          scratch_dir=tmp_path)
    generator = VllmGenerator(wide_policy(), settings, seed=7)
    (engine,) = stand_in.LLM.instances
    assert engine.in_process  # the weight sync hands the engine local tensors
    assert engine.options == {
        "skip_tokenizer_init": True, "dtype": "bfloat16", "gpu_memory_utilization": 0.25, "seed": 7,
        "enforce_eager": False, "enable_prefix_caching": True, "logprobs_mode": "processed_logprobs",
        "max_model_len": 512, "max_num_batched_tokens": 8192,
    }
    assert Path(engine.model_name) == tmp_path / "engine" and (tmp_path / "engine" / "config.json").is_file()
    assert generator.stats().engine_policy_version == 0


def test_a_lora_engine_loads_the_base_and_reserves_a_slot_for_the_rank(stand_in):
    policy = load_policy("tiny-small", adapter="lora", lora_rank=12, lora_alpha=24)
    VllmGenerator(policy, VllmConfig())
    (engine,) = stand_in.LLM.instances
    assert engine.options["enable_lora"] and engine.options["max_loras"] == 1
    assert engine.options["max_lora_rank"] == 16  # the smallest slot vLLM accepts that holds rank 12
    assert Path(engine.model_name).name == "base"  # a tiny base is not on the hub: the export's copy
    assert [lora_rank_slot(r) for r in (1, 2, 8, 9, 128, 300, 512)] == [1, 8, 8, 16, 128, 320, 512]
    with pytest.raises(BackendUnavailableError):
        lora_rank_slot(513)


def test_without_processed_logprobs_the_recompute_check_would_fail(stand_in, monkeypatch):
    """vLLM returns raw log-probs unless told otherwise; the contract test would catch a missing option."""
    import ftis.node.generation.vllm_engine as engine_module

    policy = wide_policy()
    sampling = SamplingSettings(0.7, 0.9, 0, 12)
    groups = VllmGenerator(policy, VllmConfig()).generate(PROMPTS, G, sampling, seed=3)
    assert recompute_gap(policy.model, groups, sampling) <= 1e-4
    monkeypatch.setattr(engine_module, "LOGPROBS_MODE", "raw_logprobs")
    raw = VllmGenerator(policy, VllmConfig()).generate(PROMPTS, G, sampling, seed=3)
    assert recompute_gap(policy.model, raw, sampling) > 0.05


def test_a_missing_or_old_vllm_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # what an uninstalled package looks like to import
    with pytest.raises(BackendUnavailableError, match=r"pip install -e '\.\[vllm\]'"):
        make_generator("vllm", wide_policy(), GenerationConfig(backend="vllm"))
    stand_in = vllm_stand_in.install(monkeypatch)
    monkeypatch.setattr(stand_in, "__version__", "0.10.1")
    with pytest.raises(BackendUnavailableError, match=r"0\.10\.2"):
        VllmGenerator(wide_policy(), VllmConfig())
    assert [_version_tuple(v) for v in ("0.10.2", "0.10.2rc1", "0.33.0+cu128", "1.0.dev5", "x")] == [
        (0, 10, 2), (0, 10, 2), (0, 33, 0), (1, 0), ()]


# --- reading vLLM's outputs ---------------------------------------------------------------------------------


def sample(token_ids, logprobs="auto", finish_reason="stop"):
    if logprobs == "auto":
        logprobs = [{t: vllm_stand_in.Logprob(-0.5)} for t in token_ids]
    return vllm_stand_in.CompletionOutput(0, "", list(token_ids), None, logprobs, finish_reason)


def test_outputs_become_completions_with_the_sampled_tokens_logprobs():
    stop = frozenset({EOS, 3})
    c = to_generated(sample([5, 6, 3]), stop, max_new_tokens=8)
    assert c.token_ids.tolist() == [5, 6, 3] and c.finish_reason == "stop"
    assert c.token_ids.dtype == np.int64 and c.sampler_logprobs.dtype == np.float32
    np.testing.assert_array_equal(c.sampler_logprobs, [-0.5, -0.5, -0.5])
    # The sampled token's entry is read, not the first one (logprobs=k returns top-k entries beside it).
    top = [{9: vllm_stand_in.Logprob(-0.1), 5: vllm_stand_in.Logprob(-2.0)}]
    assert to_generated(sample([5], top, "length"), stop, 1).sampler_logprobs.tolist() == [-2.0]
    # Rounding can leave a near-certain token at +1e-7; the wire refuses positive log-probs.
    tiny = [{5: vllm_stand_in.Logprob(1e-7)}]
    assert to_generated(sample([5], tiny, "length"), stop, 1).sampler_logprobs.tolist() == [0.0]


def test_an_end_of_sequence_on_the_last_allowed_token_is_a_stop_whatever_vllm_calls_it():
    # vLLM ≥ 0.10.2 before PR #27555 says "length" when the EOS lands exactly at max_new_tokens
    stop = frozenset({EOS, 3})
    c = to_generated(sample([5, 6, 3], finish_reason="length"), stop, max_new_tokens=3)
    assert c.finish_reason == "stop" and c.token_ids.tolist() == [5, 6, 3]
    with pytest.raises(VllmOutputError, match="elsewhere"):  # before the limit, "length" with an EOS is still wrong
        to_generated(sample([5, 6, 3], finish_reason="length"), stop, max_new_tokens=8)


@pytest.mark.parametrize(
    "bad, match",
    [
        (sample([5, 6, 3], logprobs=None), "log-probs"),  # logprobs were not requested
        (sample([5, 6, 3], logprobs=[{5: vllm_stand_in.Logprob(-1.0)}]), "log-probs"),  # one per token
        (sample([5, 3], logprobs=[{5: vllm_stand_in.Logprob(-1.0)}, {4: vllm_stand_in.Logprob(-1.0)}]),
         "no log-prob"),  # the sampled token's is missing
        (sample([5, 3], logprobs=[{5: vllm_stand_in.Logprob(float("nan"))}, {3: vllm_stand_in.Logprob(-1.0)}]),
         "non-finite"),
        (sample([5, 3], finish_reason="abort"), "abort"),
        (sample([5, 6], finish_reason="stop"), "stop"),  # "stop" without a stop id at the end
        (sample([5, 3, 6], finish_reason="length"), "elsewhere"),  # a stop id in the middle
        (sample([], logprobs=[]), "0 tokens"),
        (sample([5] * 9, finish_reason="length"), "9 tokens"),  # more than max_new_tokens
    ],
    ids=["no-logprobs", "too-few", "missing-token", "nan", "abort", "stop-without-id", "id-inside", "empty", "long"],
)
def test_outputs_that_cannot_be_vouched_for_are_refused(bad, match):
    with pytest.raises(VllmOutputError, match=match):
        to_generated(bad, frozenset({EOS, 3}), max_new_tokens=8)


def test_every_sample_of_a_call_has_its_own_seed():
    seeds = request_seeds(11, num_prompts=5, num_completions=4)
    per_sample = [s + j for s in seeds for j in range(4)]  # vLLM seeds sample j with the request's seed + j
    assert len(set(per_sample)) == 20 and request_seeds(11, 5, 4) == seeds != request_seeds(12, 5, 4)
    assert request_seeds(None, 3, 4) == [None, None, None]


def test_the_stop_ids_are_the_given_ones_and_the_models_end_of_sequence_ids():
    policy = wide_policy()
    assert stop_token_ids(policy.model, None) == {EOS}
    assert stop_token_ids(policy.model, [7, 8]) == {EOS, 7, 8}
    policy.model.generation_config.eos_token_id = [EOS, 30]  # as Qwen's instruct models name two
    assert stop_token_ids(policy.model, 7) == {EOS, 7, 30}


def test_requests_carry_the_nodes_sampling_settings(stand_in, monkeypatch):
    seen = []
    original = stand_in.LLM.generate
    monkeypatch.setattr(stand_in.LLM, "generate",
                        lambda self, prompts, params, **kw: seen.append((prompts, params, kw)) or
                        original(self, prompts, params, **kw))
    generator = VllmGenerator(wide_policy(), VllmConfig(), eos_token_ids=[3])
    generator.generate(PROMPTS, G, SamplingSettings(0.8, 0.9, 5, 6), seed=1)
    generator.generate(PROMPTS, G, SamplingSettings(1.0, 1.0, 0, 6), seed=None)
    (prompts, params, kw), (_, unseeded, _) = seen
    assert prompts == [{"prompt_token_ids": p.tolist()} for p in PROMPTS]
    assert kw == {"use_tqdm": False, "lora_request": None}
    first = params[0]
    assert (first.n, first.temperature, first.top_p, first.top_k, first.max_tokens) == (G, 0.8, 0.9, 5, 6)
    assert first.logprobs == 0 and first.detokenize is False and first.stop_token_ids == [EOS, 3]
    assert [p.seed for p in params] == request_seeds(1, len(PROMPTS), G)
    assert unseeded[0].top_k == 0 and all(p.seed is None for p in unseeded)  # -1 ("off") as vLLM stores it


# --- weight sync --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reload", [True, False], ids=["reload_weights", "older-vllm-load_weights"])
def test_full_weights_are_synced_in_place_on_the_explicit_call_and_not_otherwise(stand_in, monkeypatch, reload):
    """Through the worker's in-place ``reload_weights`` where vLLM has it, else the model's own loader."""
    if not reload:
        monkeypatch.delattr(vllm_stand_in._Worker, "reload_weights")
    policy = wide_policy()
    generator = VllmGenerator(policy, VllmConfig(), seed=0)
    (engine,) = stand_in.LLM.instances
    sampling = SamplingSettings(1.0, 1.0, 0, 10)
    before = generator.generate(PROMPTS, G, sampling, seed=5)
    old = {name: p.detach().clone() for name, p in policy.model.named_parameters()}
    stale_model = wide_policy().model
    stale_model.load_state_dict(old)
    with torch.no_grad():  # an optimizer step, as far as the engine can tell
        for p in policy.model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    unsynced = generator.generate(PROMPTS, G, sampling, seed=5)  # no sync asked for: the engine's weights stay
    assert [e[0] for e in engine.events] == ["generate", "generate"] and generator.stats().weight_syncs == 0
    assert recompute_gap(stale_model, unsynced, sampling) <= 1e-4
    generator.sync_weights(1)  # the sync happens here, before any generation asks for it
    assert [e[0] for e in engine.events[2:]] == [*(["reload_weights"] if reload else []), "load_weights",
                                                 "reset_prefix_cache"]
    assert generator.stats().engine_policy_version == generator.policy_version == 1
    after = generator.generate(PROMPTS, G, sampling, seed=5)
    assert events(engine, "generate") == [("generate", 0, None), ("generate", 0, None), ("generate", 1, None)]
    assert recompute_gap(policy.model, after, sampling) <= 1e-4  # the engine now samples the new weights
    assert recompute_gap(stale_model, after, sampling) > 1e-2
    assert any(not np.array_equal(a.token_ids, b.token_ids)
               for ga, gb in zip(before, after, strict=True) for a, b in zip(ga, gb, strict=True))
    generator.sync_weights(1)  # the version the engine holds: nothing to do
    generator.generate(PROMPTS, G, sampling, seed=5)
    stats = generator.stats()
    assert (stats.engine_policy_version, stats.weight_syncs, stats.generations) == (1, 1, 4)
    assert stats.weight_sync_seconds > 0
    with pytest.raises(AttributeError):
        generator.policy_version = 2  # type: ignore[misc]  # reading it is all; syncing is a call


class _HeadMethod:
    def __init__(self):
        self.processed = []

    def process_weights_after_loading(self, layer) -> None:
        self.processed.append(layer)


@pytest.mark.parametrize("tied", [True, False])
def test_after_a_reload_a_tied_head_is_processed_again(tied):
    """vLLM's reload gives a tied head no weight of its own, so a processed copy of it (the CPU backend packs
    it) would keep the old embeddings: measured with vLLM 0.32's CPU build, the engine's log-probs were then
    0.002 nats (mean) off the new weights instead of 3e-6. An untied head was loaded like any layer."""
    from ftis.node.generation.vllm_sync import _reprocess_tied_head

    model = torch.nn.Module()
    model.config = LlamaConfig(tie_word_embeddings=tied)
    model.lm_head = torch.nn.Linear(4, 4)
    model.lm_head.quant_method = _HeadMethod()
    assert _reprocess_tied_head(model) is tied
    assert model.lm_head.quant_method.processed == ([model.lm_head] if tied else [])
    assert _reprocess_tied_head(torch.nn.Linear(2, 2)) is False  # no head, no config: nothing to do


def test_lora_adapters_go_in_under_a_new_id_per_version_and_the_old_one_goes(stand_in, tmp_path):
    policy = load_policy("tiny-small", adapter="lora", lora_rank=8, lora_alpha=16, seed=1)
    generator = VllmGenerator(policy, VllmConfig(scratch_dir=tmp_path))
    (engine,) = stand_in.LLM.instances
    sampling = SamplingSettings(1.0, 1.0, 0, 8)
    # The policy's adapter goes in with the engine (after a warm start it is no no-op), before any generation.
    assert generator.stats().engine_policy_version == 0 and engine.llm_engine.list_loras() == {1}
    generator.generate(PROMPTS, G, sampling, seed=2)
    assert events(engine, "generate") == [("generate", 0, 1)]
    for version in (1, 2):
        with torch.no_grad():
            for name, p in policy.model.named_parameters():
                if "lora_B" in name:
                    p.add_(0.5 * torch.randn_like(p))
        generator.sync_weights(version)
        assert engine.llm_engine.list_loras() == {version + 1}  # in the engine before anything is generated
        groups = generator.generate(PROMPTS, G, sampling, seed=2)
        assert recompute_gap(policy.model.eval(), groups, sampling) <= 1e-4  # the engine serves this adapter
    assert events(engine, "generate")[1:] == [("generate", 0, 2), ("generate", 0, 3)]  # base weights untouched
    assert [e for e in engine.events if e[0] in ("add_lora", "remove_lora")] == [
        ("add_lora", 1), ("remove_lora", 1), ("add_lora", 2), ("remove_lora", 2), ("add_lora", 3)]
    assert engine.llm_engine.list_loras() == {3}
    assert sorted(p.name for p in tmp_path.glob("lora-*")) == ["lora-v00000002-3"]  # older adapters deleted
    assert len(events(engine, "reset_prefix_cache")) == 3
    assert generator.stats().weight_syncs == 3


def test_a_failed_sync_raises_and_nothing_is_generated_until_one_succeeds(stand_in, monkeypatch):
    generator = VllmGenerator(wide_policy(), VllmConfig())
    (engine,) = stand_in.LLM.instances
    monkeypatch.setattr(vllm_stand_in._EngineModel, "load_weights",
                        lambda self, weights: (_ for _ in ()).throw(RuntimeError("CUDA out of memory")))
    with pytest.raises(WeightSyncError, match="CUDA out of memory"):
        generator.sync_weights(1)
    assert generator.stats().engine_policy_version is None  # half-loaded weights are no version's
    with pytest.raises(WeightSyncError, match=r"sync_weights\(1\) must succeed"):
        generator.generate(PROMPTS, G, SamplingSettings(1.0, 1.0, 0, 4))
    assert events(engine, "generate") == []
    monkeypatch.undo()  # the stand-in's own loader again (and the fixture's modules are gone: reinstall)
    vllm_stand_in.install(monkeypatch)
    generator.sync_weights(1)
    generator.generate(PROMPTS, G, SamplingSettings(1.0, 1.0, 0, 4))
    assert generator.stats().engine_policy_version == 1 and events(engine, "generate") == [("generate", 1, None)]


def test_a_prefix_cache_that_cannot_be_emptied_or_a_refused_adapter_fails_the_sync(stand_in, monkeypatch):
    """Cached prompt KV blocks of the old weights would be stale weights by another name."""
    sampling = SamplingSettings(1.0, 1.0, 0, 4)
    generator = VllmGenerator(wide_policy(), VllmConfig())
    lora_policy = load_policy("tiny-small", adapter="lora", lora_rank=8, lora_alpha=16)
    lora = VllmGenerator(lora_policy, VllmConfig())
    monkeypatch.setattr(stand_in.LLM, "reset_prefix_cache", lambda self, *args: False)
    with pytest.raises(WeightSyncError, match="prefix cache"):
        generator.sync_weights(1)
    with pytest.raises(WeightSyncError):
        generator.generate(PROMPTS, G, sampling)
    monkeypatch.setattr(vllm_stand_in._Engine, "add_lora", lambda self, request: False)
    with pytest.raises(WeightSyncError, match="refused the LoRA adapter"):
        lora.sync_weights(1)
    assert lora.stats().engine_policy_version is None and not list(lora.scratch.glob("lora-*"))
    with pytest.raises(WeightSyncError, match="refused the LoRA adapter"):  # the first adapter, at the start
        VllmGenerator(lora_policy, VllmConfig())


def test_a_nodes_rounds_generate_with_the_weights_of_the_version_they_publish(stand_in):
    """End to end: each round's batch says which policy version generated it, and it is the engine's."""
    config = NodeConfig.model_validate({
        "model": {"name": "tiny-small", "seed": 0},
        "generation": {"prompts_per_round": 3, "group_size": 6, "max_new_tokens": 6, "temperature": 1.5,
                       "backend": "vllm"},
        "trainer": {"learning_rate": 1e-2},
        "loss": {"divergence_threshold": 1e9},
    })
    policy = load_policy("tiny-small", seed=0)
    generator = make_generator("vllm", policy, config.generation)
    assert isinstance(generator, VllmGenerator)
    (engine,) = stand_in.LLM.instances
    hub = MemoryHub()
    node = Node(config, policy, DigitTask(), generator, MemoryTransport(hub, "ftis-demo", "a", policy.fingerprint,
                                                                      LIMITS))
    published = []
    node.transport.publish = published.append  # keep the batches; no peers here
    for _ in range(3):
        node.run_round()
    versions = [batch.policy.policy_version for batch in published]
    assert versions == [0, 1, 2]  # DigitTask's rewards vary, so every round stepped
    assert [e[1] for e in events(engine, "generate")] == versions  # engine weights = the published version
    assert generator.stats().weight_syncs == 3  # one per optimizer step, right after it
    assert [e[0] for e in engine.events if e[0] != "reload_weights"] == [
        "generate", "load_weights", "reset_prefix_cache"] * 3


def test_a_resumed_node_syncs_its_engine_to_the_checkpoint_when_it_resumes(stand_in, tmp_path):
    """The engine starts from the fresh model's weights; resuming hands it the checkpoint's there and then."""
    from ftis.node.runner.checkpoint_files import resume_latest, save_checkpoint

    def vllm_node() -> tuple[Node, list]:
        node = make_node(MemoryHub(), "a", generation={"backend": "vllm"})
        published: list = []
        node.transport.publish = published.append  # keep the batches; no peers here
        return node, published

    straight, batches = vllm_node()
    for _ in range(2):
        straight.run_round()
    save_checkpoint(straight, tmp_path, keep_last=1)
    straight.run_round()
    resumed, resumed_batches = vllm_node()
    engine = stand_in.LLM.instances[-1]
    assert engine.events == []
    resume_latest(resumed, tmp_path)
    assert [e[0] for e in engine.events if e[0] != "reload_weights"] == ["load_weights", "reset_prefix_cache"]
    assert resumed.generator.policy_version == resumed.generator.stats().engine_policy_version == 2
    resumed.run_round()
    assert resumed_batches[0].policy.policy_version == batches[2].policy.policy_version == 2
    for sent, again in zip(batches[2].groups, resumed_batches[0].groups, strict=True):  # the checkpoint's weights
        assert [c.token_ids.tolist() for c in sent.completions] == [c.token_ids.tolist() for c in again.completions]


def test_build_node_starts_the_vllm_backend_when_configured(stand_in):
    from ftis.node.runner.join import build_node

    config = NodeConfig.model_validate({"generation": {"backend": "vllm", "vllm": {"enforce_eager": True}}})
    hub = MemoryHub()
    node = build_node(config, lambda fingerprint: MemoryTransport(hub, "ftis-demo", "a", fingerprint, LIMITS))
    try:
        assert isinstance(node.generator, VllmGenerator)
        assert stand_in.LLM.instances[0].options["enforce_eager"] is True
    finally:
        node.transport.close()


# --- vLLM stays optional ------------------------------------------------------------------------------------


def test_importing_the_package_and_the_help_never_import_vllm():
    code = (
        "import sys\n"
        "import ftis.node.generation, ftis.node.config, ftis.node.generation.vllm_backend\n"
        "import ftis.node.generation.vllm_engine\n"
        "from typer.testing import CliRunner\n"
        "from ftis.node.cli import app\n"
        "for args in (['--help'], ['join', '--help']):\n"
        "    assert CliRunner().invoke(app, args).exit_code == 0\n"
        "assert 'vllm' not in sys.modules, 'vllm was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_join_with_the_vllm_backend_and_no_vllm_exits_with_the_reason(monkeypatch, tmp_path):
    from typer.testing import CliRunner

    from ftis.node.cli import app

    monkeypatch.setitem(sys.modules, "vllm", None)
    result = CliRunner().invoke(app, ["join", "--backend", "vllm", "--model", "tiny-small", "--rounds", "1",
                                      "--out", str(tmp_path / "node")])
    assert result.exit_code == 1, result.output
    assert "needs vLLM, which is not installed" in result.output
