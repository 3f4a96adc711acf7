"""Helpers shared by the CPU benchmarks of the node (``trainer.py``, ``generation.py``); not a benchmark itself.

- ``demo_cases``: the models of ``ftis-node demo`` as its packaged settings (``node/demo/config.toml``) make
  them — tiny-small full, tiny-medium full, tiny-small LoRA — plus tiny-medium LoRA (the small LoRA node's
  adapter settings on the medium model) and, with ``larger``, tiny-large full; each a whole ``NodeConfig``
  with the demo's task, generation and mix settings.
- ``load_case``: the case's policy, random weights from its seed (the demo warms the tiny models up first;
  timing does not depend on the weights, except that a random model rarely stops before ``max_new_tokens``).
- ``demo_prompts``: the task's prompts as the node tokenizes them (no chat template: the tiny models have none).
- ``STAND_IN``, asked for by name only: the Qwen2 stand-in (``node/models/stand_in.py``: Qwen2's real 151,936-token
  vocabulary on tiny-small's width, 9.8M parameters) with the demo's settings, micro-batches of 1,024 padded tokens
  (the trainer's logits are 0.6 MB per position); needs ``bash .ci/tokenizers``. Its peers (``stand_in_peers``) are
  stand-ins of other seeds, as a peer's ids must be in its vocabulary.
"""

import argparse
import contextlib
import functools
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ftis.node.config import NodeConfig
from ftis.node.demo.settings import load_demo_config, merged

EXTRA_CASES = {  # over the demo's [common], like its own [nodes.<name>] tables
    "medium-lora": {"model": {"name": "tiny-medium", "adapter": "lora", "lora_rank": 8, "lora_alpha": 16.0}},
    "large": {"model": {"name": "tiny-large", "adapter": "full"}},
}
STAND_IN = "qwen2-stand-in"
STAND_IN_MICROBATCH = 1024  # padded tokens per forward pass: 1,024 × 151,936 float32 logits are 0.6 GB


@functools.cache
def stand_in_model(seed: int = 0) -> str:
    """The Qwen2 stand-in with ``seed``'s weights, built once per process in a temporary folder."""
    from ftis.node.models.stand_in import build_stand_in, real_tokenizer_folder

    folder = Path(tempfile.mkdtemp(prefix="ftis-stand-in-")) / f"{STAND_IN}-{seed}"
    return str(build_stand_in(real_tokenizer_folder("qwen2"), folder, seed=seed))


@dataclass(frozen=True)
class Case:
    name: str  # the demo's node name, or one of EXTRA_CASES
    config: NodeConfig

    @property
    def label(self) -> str:
        model = "qwen2 stand-in" if self.name == STAND_IN else self.config.model.name
        return f"{model} {self.config.model.adapter}"

    def with_generation(self, **settings: int) -> "Case":
        """The same case with some ``[generation]`` settings replaced (``prompts_per_round=4``...)."""
        generation = self.config.generation.model_copy(update=settings)
        return Case(self.name, self.config.model_copy(update={"generation": generation}))


def demo_cases(*, larger: bool = False, names: list[str] | None = None) -> list[Case]:
    """The demo's nodes (in the file's order), tiny-medium LoRA, and tiny-large with ``larger``; ``names``
    picks some of them by name (``ValueError`` for an unknown one)."""
    demo = load_demo_config()
    settings = demo.node_settings()
    settings["medium-lora"] = merged(demo.common, EXTRA_CASES["medium-lora"])
    if larger or (names and "large" in names):
        settings["large"] = merged(demo.common, EXTRA_CASES["large"])
    if names and STAND_IN in names:
        settings[STAND_IN] = merged(demo.common, {"model": {"name": stand_in_model(), "adapter": "full"},
                                                  "trainer": {"max_tokens_per_microbatch": STAND_IN_MICROBATCH}})
    for values in settings.values():
        values.get("model", {}).pop("warmup", None)  # random weights: no warm start to train or load
    if names:
        unknown = [name for name in names if name not in settings]
        if unknown:
            raise ValueError(f"unknown case {', '.join(unknown)}; choose from {', '.join(settings)}")
        settings = {name: settings[name] for name in names}
    return [Case(name, NodeConfig.model_validate(values)) for name, values in settings.items()]


def load_case(config: NodeConfig):
    """The case's ``Policy`` (CPU, float32)."""
    from ftis.node.models import load_policy

    m = config.model
    return load_policy(m.name, adapter=m.adapter, seed=m.seed, lora_rank=m.lora_rank, lora_alpha=m.lora_alpha)


def stand_in_peers(case: Case, seeds: tuple[int, ...]) -> list | None:
    """The stand-in case's peers, one per seed (stand-ins of those seeds); None for the tiny models' cases."""
    if case.name != STAND_IN:
        return None
    from transformers import AutoModelForCausalLM

    return [AutoModelForCausalLM.from_pretrained(stand_in_model(seed)).eval() for seed in seeds]


def demo_prompts(config: NodeConfig, tokenizer, count: int, first: int = 0) -> list[np.ndarray]:
    """Prompt ids of the task's problems ``first``..``first + count - 1`` of its training split."""
    from ftis.node.tasks import build_task
    from ftis.node.tasks.prompts import prompt_ids

    task = build_task(config.task)
    return [prompt_ids(tokenizer, task.prompt(task.problem(config.task.split, index)), chat=False)
            for index in range(first, first + count)]


def add_case_arguments(parser: argparse.ArgumentParser, quick: str) -> None:
    """The options that pick the models a benchmark runs on: ``--cases``, ``--larger``, ``--quick`` (whose
    help says what else it shrinks)."""
    parser.add_argument("--cases", default="", help="demo node names, comma-separated (default: all)")
    parser.add_argument("--larger", action="store_true", help="add tiny-large full")
    parser.add_argument("--quick", action="store_true", help=quick)


def chosen_cases(args: argparse.Namespace) -> list[Case]:
    """The cases ``add_case_arguments``' options pick: tiny-small alone with ``--quick`` unless named."""
    names = [name for name in args.cases.split(",") if name.strip()] or (["small"] if args.quick else None)
    return demo_cases(larger=args.larger, names=names)


def load_average() -> str:
    """The machine's 1-, 5- and 15-minute load averages, as the benchmarks print them."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


@contextlib.contextmanager
def torch_threads_kept() -> Iterator[None]:
    """Whatever the body sets torch's thread count to, it is back as it was afterwards."""
    import torch

    before = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(before)
