"""The warm-start cache (keys, hits without training, locking, atomic folders) and ``build_node`` with a
warm start, full and LoRA. Every test uses a temporary cache folder, never the user's home."""

import json
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from ftis.node.config import NodeConfig
from ftis.node.models import load_policy
from ftis.node.runner.join import build_node
from ftis.node.swarm.exchange.limits import InboxLimits
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.node.tasks import ArithmeticSettings
from ftis.node.warmup import WarmupCacheError, WarmupPlan, WarmupSpec, cache, cache_key, cache_root, warm_start

SPEC = WarmupSpec("tiny-small", seed=0, data=ArithmeticSettings(max_digits=1, operations="+"),
                  plan=WarmupPlan(steps=4, learning_rate=3e-3, batch_size=8, eval_problems=5))
PROBE = torch.tensor([[14, 24, 15, 17, 26], [19, 24, 12, 26, 2]])  # (B=2, T=5): "4+5=" style ids


@pytest.fixture(autouse=True)
def no_home_cache(tmp_path, monkeypatch):
    """Whatever a test forgets to pass, nothing lands in the real ~/.cache."""
    monkeypatch.setenv("FTIS_CACHE", str(tmp_path / "env-cache"))


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=PROBE).logits


@pytest.mark.parametrize("change", [
    {"model": "tiny-medium"},
    {"seed": 1},
    {"data": SPEC.data.model_copy(update={"operations": "+-"})},
    {"data": SPEC.data.model_copy(update={"max_digits": 2})},
    {"data": SPEC.data.model_copy(update={"format": "tags"})},
    {"data": SPEC.data.model_copy(update={"seed": 5})},
    {"plan": replace(SPEC.plan, steps=5)},
    {"plan": replace(SPEC.plan, learning_rate=1e-3)},
    {"plan": replace(SPEC.plan, batch_size=16)},
    {"plan": replace(SPEC.plan, eval_problems=6)},
    {"plan": replace(SPEC.plan, schedule="constant")},
    {"plan": replace(SPEC.plan, stop_accuracy=0.3)},
    {"plan": replace(SPEC.plan, check_every=10)},
    {"plan": replace(SPEC.plan, no_carry_share=0.5)},
    {"data": SPEC.data.model_copy(update={"operand_draw": "value"})},
], ids=lambda change: next(iter(change)))
def test_any_setting_changes_the_key(change):
    assert cache_key(replace(SPEC, **change)) != cache_key(SPEC)


def test_the_key_is_stable_readable_and_versioned(monkeypatch):
    key = cache_key(SPEC)
    assert key == cache_key(replace(SPEC))  # equal recipes, equal keys
    assert key.startswith("tiny-small-") and len(key.rsplit("-", 1)[1]) == 16
    monkeypatch.setattr(cache, "CODE_VERSION", cache.CODE_VERSION + 1)
    assert cache_key(SPEC) != key


def test_the_key_of_a_recipe_stays_put():
    """Caches on disk stay valid: a change of how settings are declared must not move their keys (a change of
    the training code bumps CODE_VERSION, and this value with it)."""
    assert cache_key(SPEC) == "tiny-small-62af219fbcf29e48"


def test_cache_root_explicit_then_environment_then_home(tmp_path, monkeypatch):
    assert cache_root(tmp_path / "mine") == tmp_path / "mine"
    monkeypatch.setenv("FTIS_CACHE", str(tmp_path / "env"))
    assert cache_root() == tmp_path / "env" / "warmup"
    monkeypatch.delenv("FTIS_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_root() == tmp_path / "home" / ".cache" / "ftis-node" / "warmup"


def test_second_call_loads_the_same_weights_without_training(tmp_path, monkeypatch):
    lines = []
    first = warm_start(SPEC, tmp_path, lines.append)
    assert not first.cached and first.path == tmp_path / cache_key(SPEC)
    assert any("step 4/4" in line for line in lines) and str(first.path) in lines[-1]

    def no_training(*args, **kwargs):
        raise AssertionError("a cache hit must not train")

    monkeypatch.setattr(cache, "supervised_warmup", no_training)
    lines.clear()
    second = warm_start(SPEC, tmp_path, lines.append)
    assert second.cached and second.path == first.path and second.result == first.result
    assert lines == [f"warm start: cached {first.path} ({cache._accuracy_line(first.result)})"]
    trained_again = load_policy(str(second.path))
    record = json.loads((second.path / cache.RECORD_FILE).read_text())
    assert record["recipe"]["plan"]["steps"] == 4
    # the folder's weights are the warmed model's, not a fresh tiny-small's
    fresh = load_policy("tiny-small", seed=0)
    assert not torch.allclose(logits(trained_again.model), logits(fresh.model))
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left behind


def test_concurrent_callers_train_once_and_share_the_folder(tmp_path, monkeypatch):
    calls = []
    real = cache.supervised_warmup

    def slow_counted(*args, **kwargs):
        calls.append(threading.get_ident())
        time.sleep(0.5)  # long enough for the other caller to reach the lock
        return real(*args, **kwargs)

    monkeypatch.setattr(cache, "supervised_warmup", slow_counted)
    results, lines = [], []
    threads = [threading.Thread(target=lambda: results.append(warm_start(SPEC, tmp_path, lines.append)))
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(calls) == 1 and len(results) == 2
    assert sorted(result.cached for result in results) == [False, True]
    assert results[0].path == results[1].path
    assert any("waiting for another process" in line for line in lines)


def test_a_folder_without_a_valid_record_is_an_error_not_overwritten(tmp_path):
    folder = tmp_path / cache_key(SPEC)
    folder.mkdir(parents=True)  # e.g. copied by hand without its record: not a hit, and not overwritten
    with pytest.raises(WarmupCacheError, match="holds no"):
        warm_start(SPEC, tmp_path)
    (folder / cache.RECORD_FILE).write_text("{not json")
    with pytest.raises(WarmupCacheError, match="delete"):
        warm_start(SPEC, tmp_path)
    (folder / cache.RECORD_FILE).write_text(json.dumps({"recipe": {"model": "other"}, "result": {
        "accuracy_before": 0.0, "accuracy_after": 0.5, "eval_problems": 5, "first_loss": 1.0, "last_loss": 0.5,
        "train_seconds": 1.0}}))
    with pytest.raises(WarmupCacheError, match="another recipe"):
        warm_start(SPEC, tmp_path)


LIMITS = InboxLimits(max_age_s=600, per_peer_quota=8, max_batches=64, max_bytes=10**8)


def node_config(tmp_path: Path, adapter: str) -> NodeConfig:
    return NodeConfig.model_validate({
        "model": {"name": "tiny-small", "adapter": adapter, "seed": 0, "lora_rank": 8, "lora_alpha": 16,
                  "warmup": {"steps": 4, "learning_rate": 3e-3, "batch_size": 8, "eval_problems": 5,
                             "arithmetic": {"operations": "+"}, "cache_dir": str(tmp_path / "cache")}},
        "task": {"arithmetic": {"max_digits": 1}},
        "generation": {"prompts_per_round": 2, "group_size": 4, "max_new_tokens": 4},
    })


@pytest.mark.parametrize("adapter", ["full", "lora"])
def test_build_node_starts_from_the_warm_start(tmp_path, adapter):
    config = node_config(tmp_path, adapter)
    hub, lines = MemoryHub(), []
    node = build_node(config, lambda fingerprint: MemoryTransport(hub, config.swarm.run_id, "a", fingerprint, LIMITS),
                      echo=lines.append)
    try:
        warm = warm_start(SPEC, tmp_path / "cache")  # the recipe the config describes: found, not trained again
        assert warm.cached
        assert lines[0].startswith("warm start: training tiny-small") and str(warm.path) in lines[-1]
        assert node.policy.adapter == adapter
        assert node.policy.name == f"tiny-small+warmup-{warm.key.rsplit('-', 1)[1]}"
        warmed = load_policy(str(warm.path))
        # a fresh adapter (B = 0) leaves the model equal to its base: both nodes start as the warmed model
        assert torch.allclose(logits(node.policy.model), logits(warmed.model), atol=1e-6)
        if adapter == "lora":
            assert all("lora_" in name for name, p in node.policy.model.named_parameters() if p.requires_grad)
        assert node.run_round().own_groups == 2
    finally:
        node.transport.close()


def test_warmup_is_refused_for_other_models_and_tasks():
    with pytest.raises(ValueError, match="tiny"):
        NodeConfig.model_validate({"model": {"name": "Qwen/Qwen2.5-1.5B", "warmup": {"steps": 10}}})
    with pytest.raises(ValueError, match="arithmetic"):
        NodeConfig.model_validate({"model": {"warmup": {"steps": 10}}, "task": {"name": "gsm8k"}})
    assert NodeConfig.model_validate({"task": {"name": "gsm8k"}}).model.warmup.steps == 0  # off by default
