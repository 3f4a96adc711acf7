"""``[generation]`` and ``[generation.vllm]``: sampling this node's own groups."""

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from ftis.node.config.base import MAX_COUNT, Section
from ftis.protocol.limits import (
    MAX_BATCH_TOKENS,
    MAX_COMPLETION_TOKENS,
    MAX_GROUPS,
    MAX_PROMPT_TOKENS,
    MAX_TEMPERATURE,
    MAX_VOCAB_SIZE,
    MIN_TEMPERATURE,
)

MAX_STOP_CHARACTERS = 64  # a stop string's length: the generator decodes that many tokens' text at each step


class VllmConfig(Section):
    """The vLLM generation backend (``generation.backend = "vllm"``: the ``[vllm]`` extra, a GPU). The engine runs
    in the node's process on the trainer's GPU and takes the trainer's weights after every optimizer step."""

    gpu_memory_utilization: float = Field(
        0.3, gt=0, lt=1, description="Fraction of the GPU's total memory vLLM takes (its weights and KV cache); the "
        "trainer, loaded first, uses the rest."
    )
    dtype: Literal["bfloat16", "float16", "float32"] = Field(
        "bfloat16", description="The engine's weights' dtype (the trainer's is model.dtype)."
    )
    max_model_len: int | None = Field(
        None, ge=1, le=MAX_PROMPT_TOKENS + MAX_COMPLETION_TOKENS,
        description="Longest prompt + completion the engine serves; unset: the model's own maximum."
    )
    enforce_eager: bool = Field(False, description="No CUDA graphs: faster start-up, slower decoding.")
    max_num_batched_tokens: int | None = Field(
        None, ge=1, le=MAX_BATCH_TOKENS,
        description="Tokens the engine schedules per step (a longer prefill is split); unset: vLLM's "
        "default. vLLM's CPU build cannot split a seeded request's prefill: there, set it to at least "
        "prompts_per_round × group_size × the longest prompt's tokens."
    )
    enable_prefix_caching: bool = Field(
        True, description="Reuse a prompt's KV cache across its G completions (emptied at every weight sync)."
    )
    scratch_dir: Path | None = Field(
        None, description="Where the engine's starting export and each version's LoRA adapter are written; unset: "
        "a temporary folder, removed at exit."
    )


class GenerationConfig(Section):
    """Sampling this node's own groups."""

    backend: Literal["transformers", "vllm"] = Field(
        "transformers", description='"transformers": the built-in sampling loop (CPU or GPU); "vllm": a vLLM engine '
        "beside the trainer on its GPU, synced to the trainer's weights after every step ([generation.vllm])."
    )

    prompts_per_round: int = Field(8, ge=1, le=MAX_GROUPS, description="Prompts (groups) generated per round.")
    group_size: int = Field(
        8, ge=1, le=512, description="G: completions per prompt (horizontal grouping: this node's share, G/k)."
    )
    temperature: float = Field(1.0, ge=MIN_TEMPERATURE, le=MAX_TEMPERATURE,
                               description="Sampling temperature (the paper: 1); the protocol carries 0.1 to 10.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling; 1 = off (the paper). The trained policy "
                         "is the whole distribution at the temperature: below 1, even this node's own samples are "
                         "off-policy (IS weights below 1).")
    top_k: int = Field(0, ge=0, le=MAX_VOCAB_SIZE,
                       description="Top-k sampling; 0 = off. As top_p: on, it makes own samples off-policy.")
    max_new_tokens: int = Field(256, ge=1, le=MAX_COMPLETION_TOKENS, description="Completion length cap.")
    stop: list[str] = Field(
        default_factory=list, max_length=8, description="Strings that end a completion besides the end-of-sequence "
        'tokens (kept in it), e.g. ["</answer>"] for a base model that never writes its end token.'
    )
    batch_size: int = Field(
        64, ge=1, le=MAX_COUNT,
        description="Sequences per generation forward pass (transformers; vLLM batches by itself)."
    )
    weights: Literal["float32", "bfloat16", "int8"] = Field(
        "float32", description='What the sampler reads (transformers backend): "float32", the trainer\'s own model '
        '(default); "bfloat16", a bfloat16 copy (about 3x faster products on a CPU with bfloat16 units, the '
        'answers kept); "int8", a copy with every linear layer quantized to int8 (dynamic int8 activations), which '
        "costs some models their answers (Gemma 3). A copy merges LoRA first and takes the trainer's weights after "
        "each step. Its samples are then off-policy by the difference: their recorded log-probs are the copy's, and "
        "the importance weight corrects it (docs/node.md)."
    )
    vllm: VllmConfig = Field(default_factory=VllmConfig, description="The vLLM backend's settings.")

    @model_validator(mode="after")
    def _copies_are_the_transformers_backends(self) -> "GenerationConfig":
        if self.weights != "float32" and self.backend == "vllm":
            raise ValueError(f'weights = "{self.weights}" is the transformers backend\'s sampler copy; vLLM holds its '
                             "own weights in [generation.vllm] dtype and quantizes only checkpoints made for it, which "
                             'this node does not make: leave weights at "float32" with backend = "vllm"')
        return self

    @field_validator("stop")
    @classmethod
    def _stop_strings(cls, value: list[str]) -> list[str]:
        for text in value:
            if not 0 < len(text) <= MAX_STOP_CHARACTERS:
                raise PydanticCustomError("stop", "each stop string has 1 to {limit} characters, not {n}",
                                          {"limit": MAX_STOP_CHARACTERS, "n": len(text)})
        return value
