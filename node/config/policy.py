"""``[model]`` and ``[task]``: the policy a node trains and what it trains on."""

from typing import Literal

from pydantic import Field

from ftis.node.config.arithmetic import ArithmeticConfig
from ftis.node.config.base import MAX_LORA_RANK, MAX_SEED, Section
from ftis.node.config.training import WarmupConfig


class ModelConfig(Section):
    """The policy this node trains (docs/node.md): any size, full fine-tuning or LoRA."""

    name: str = Field("tiny-small", description="A built-in tiny model, a local folder, or a hub id.")
    adapter: Literal["full", "lora"] = Field("full", description="Train every weight, or a LoRA adapter.")
    lora_rank: int = Field(128, ge=1, le=MAX_LORA_RANK,
                           description="LoRA rank r (the paper's 128; clamped for tiny models).")
    lora_alpha: float = Field(256.0, gt=0, le=MAX_LORA_RANK * 16, description="LoRA alpha (the paper's 256).")
    lora_target_modules: list[str] | None = Field(
        None, description="Modules LoRA adapts; default: the attention and MLP projections present."
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Weights' dtype.")
    device: str = Field("cpu", description="torch device, e.g. cpu or cuda.")
    seed: int = Field(0, ge=0, le=MAX_SEED,
                      description="Seeds tiny models' weights, LoRA's init, and with the node's peer id its "
                      "sampling and problem order (nodes that share a seed still answer their own prompts).")
    revision: str | None = Field(None, description="Hub revision of the weights.")
    chat_template: Literal["auto", "on", "off"] = Field(
        "auto", description="Wrap prompts in the tokenizer's chat template: auto (when it has one), on, off."
    )
    bos: Literal["auto", "on", "off"] = Field(
        "auto", description="Begin prompts with the tokenizer's begin-of-sequence token: auto (where the tokenizer "
        "adds it to a text itself, as Gemma's does), on, off (a chat template that writes one keeps it)."
    )
    warmup: WarmupConfig = Field(default_factory=WarmupConfig, description="Supervised warm start (tiny models).")


class TaskConfig(Section):
    """What the node trains on and how it scores completions (its own and its peers')."""

    name: Literal["gsm8k", "math500", "arithmetic"] = Field("arithmetic", description="The task.")
    split: str = Field("train", description="The split prompts are drawn from.")
    data_files: dict[str, str] = Field(
        default_factory=dict, description="Local JSONL file per split (GSM8K, MATH-500); default: the hub."
    )
    arithmetic: ArithmeticConfig = Field(
        default_factory=ArithmeticConfig, description="The synthetic arithmetic task's settings."
    )
    trust_peer_answers: bool = Field(
        False, description="Score a peer's group against its own gold answer when this node lacks the problem."
    )
    check_steps: bool = Field(
        True, description="Training rewards, this node's samples and its peers': a right answer reached through a "
        "false equation written on the way (\"2+2=5\") scores 0, and a peer's such completions count against it "
        "(tasks/steps.py). Evaluations score answers alone."
    )
    few_shot: int = Field(
        0, ge=0, le=16,
        description="Solved examples before each question (0: none), from the task's dev (arithmetic) or train "
        "split: earlier turns in the chat template, else the plain layout. Peers of one tokenizer must agree on it."
    )
