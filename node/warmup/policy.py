"""A node's policy on a warm start: ``[model] warmup`` of the config → the warmed base (cached or trained
now) → ``load_policy`` on its folder, full or with a fresh LoRA adapter on top.

    policy = load_warm_policy(config.model, config.task, echo=print)

The warm-up's data mix is the node's own arithmetic settings (``[task] arithmetic``) with
``[model.warmup] arithmetic`` laid over them, so a specialist can be warmed on "+" only while it trains
on "+-". The warm-up always trains the whole base model in float32 on the CPU; the node then loads it
with its own dtype, device and adapter (LoRA: only the adapter trains from here on, on the warmed base).
"""

from collections.abc import Callable
from dataclasses import replace

from ftis.node.config import ModelConfig, TaskConfig
from ftis.node.models import Policy, load_policy
from ftis.node.tasks import ArithmeticSettings
from ftis.node.warmup.cache import WarmupSpec, warm_start
from ftis.node.warmup.train import WarmupPlan


def warmup_spec(model: ModelConfig, task: TaskConfig) -> WarmupSpec:
    """The recipe ``[model] warmup`` describes for this model and task."""
    warmup = model.warmup
    data = ArithmeticSettings(**{**task.arithmetic.model_dump(), **warmup.arithmetic})
    plan = WarmupPlan(warmup.steps, warmup.learning_rate, warmup.batch_size, warmup.eval_problems, warmup.schedule,
                      warmup.stop_accuracy, warmup.check_every, warmup.no_carry_share)
    return WarmupSpec(model.name, model.seed, data, plan)


def load_warm_policy(model: ModelConfig, task: TaskConfig, echo: Callable[[str], None] | None = None) -> Policy:
    """The node's policy on its warmed base. Its name, which peers see, is the model's name plus
    ``+warmup-<hash>`` (the cache key's hash: two nodes with the same name started from the same weights)."""
    warm = warm_start(warmup_spec(model, task), model.warmup.cache_dir, echo)
    policy = load_policy(str(warm.path), adapter=model.adapter, lora_rank=model.lora_rank,
                         lora_alpha=model.lora_alpha, lora_target_modules=model.lora_target_modules,
                         dtype=model.dtype, device=model.device, seed=model.seed)
    return replace(policy, name=f"{model.name}+warmup-{warm.key.rsplit('-', 1)[-1]}")
