"""Tiny nodes for tests: a task random tiny models can score on, and a node over the in-memory transport
(or any transport: ``build_node``)."""

from collections.abc import Callable
from dataclasses import replace

from ftis.node.config import NodeConfig
from ftis.node.generation import make_generator
from ftis.node.models import load_policy
from ftis.node.runner.node import Node
from ftis.node.swarm.exchange.limits import InboxLimits, inbox_limits
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.node.swarm.transport import Transport
from ftis.node.tasks import Problem
from ftis.node.tasks.base import PromptParts

LIMITS = InboxLimits(max_age_s=600, per_peer_quota=8, max_batches=64, max_bytes=10**8)


class DigitTask:
    """A stand-in task random tiny models can score on: reward 1 when the completion has a digit.
    (Arithmetic itself gives random weights reward 0 everywhere, so no group would teach anything.)"""

    name = "digits"
    splits = ("train",)
    answer_format = "digit"
    shot_split = "train"

    def problem(self, split: str, index: int) -> Problem:
        return Problem(self.name, split, index, f"say {index % 10}", str(index % 10))

    def size(self, split: str) -> int | None:
        return None

    def prompt(self, problem: Problem) -> str:
        return self.prompt_parts(problem).text

    def prompt_parts(self, problem: Problem) -> PromptParts:
        return PromptParts("", problem.question + ":", "")

    def solved(self, problem: Problem) -> str:
        return problem.answer

    def parse_answer(self, completion_text: str) -> str | None:
        return next((ch for ch in completion_text if ch.isdigit()), None)

    def reward(self, completion_text: str, gold: str) -> float:
        return float(self.parse_answer(completion_text) is not None)


def make_node(hub: MemoryHub, peer_id: str, model: str = "tiny-small", adapter: str = "full", seed: int = 0,
              **sections: dict) -> Node:
    """A node on ``hub`` training ``model`` on ``DigitTask``; ``sections`` override config sections."""
    config = node_config(model, adapter, seed, **sections)
    limits = replace(LIMITS, other_tokenizers=inbox_limits(config.swarm).other_tokenizers)
    return build_node(config, lambda fingerprint: MemoryTransport(hub, config.swarm.run_id, peer_id, fingerprint,
                                                                  limits))


def node_config(model: str = "tiny-small", adapter: str = "full", seed: int = 0, **sections: dict) -> NodeConfig:
    """The tiny nodes' config; ``sections`` override config sections."""
    settings = {
        "model": {"name": model, "adapter": adapter, "seed": seed, "lora_rank": 8, "lora_alpha": 16},
        "generation": {"prompts_per_round": 3, "group_size": 6, "max_new_tokens": 6, "temperature": 1.5},
        "trainer": {"learning_rate": 1e-2},
        "loss": {"divergence_threshold": 1e9},  # random models diverge wildly; keep the advantage rule only
    }
    for section, values in sections.items():
        settings[section] = {**settings.get(section, {}), **values}
    return NodeConfig.model_validate(settings)


def build_node(config: NodeConfig, connect: Callable[[str], Transport]) -> Node:
    """A node training ``config``'s model on ``DigitTask`` over ``connect(its tokenizer fingerprint)``."""
    m = config.model
    policy = load_policy(m.name, adapter=m.adapter, seed=m.seed, lora_rank=m.lora_rank, lora_alpha=m.lora_alpha)
    generator = make_generator(config.generation.backend, policy, config.generation, seed=m.seed)
    return Node(config, policy, DigitTask(), generator, connect(policy.fingerprint))
