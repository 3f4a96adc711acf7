"""Built-in tiny causal LMs for CPU runs and tests: nothing is downloaded.

    from ftis.node.models.tiny import build_tiny_model
    model = build_tiny_model("tiny-medium", seed=0)  # ~0.5M parameters, random weights

Three sizes that share the built-in tokenizer (``tokenizer.py``), as Qwen2.5-1.5B and -3B share
theirs, so their token ids mean the same and they can train on each other's samples:

| name            | architecture | hidden | layers | heads (kv) | MLP | parameters |
|-----------------|--------------|--------|--------|------------|-----|------------|
| ``tiny-small``  | Llama        | 64     | 2      | 4 (2)      | 192 | 105,344    |
| ``tiny-medium`` | Llama        | 128    | 4      | 4 (2)      | 192 | 506,112    |
| ``tiny-large``  | Llama        | 192    | 6      | 6 (2)      | 384 | 1,939,584  |

Input and output embeddings are tied (as in Qwen2.5 ≤ 3B) and dropout is zero, so a model's log-probs
are a pure function of its weights, which the importance ratios rely on.

Why Llama and not Qwen2: for a folder whose config says ``qwen2``, transformers 5's ``AutoTokenizer``
ignores the saved tokenizer class and builds a ``Qwen2Tokenizer`` (a byte-level pipeline) from the
vocabulary, which silently changes the ids of the character-level tokenizer. A Llama folder loads
the saved ``tokenizer.json`` as it is, in this package and in anything else that uses AutoTokenizer.
"""

from collections.abc import Callable

from transformers import AutoModelForCausalLM, LlamaConfig, PretrainedConfig, PreTrainedModel

from ftis.node.models.seeding import seeded
from ftis.node.models.tokenizer import BOS, EOS, PAD, VOCABULARY

MAX_POSITIONS = 2048  # rotary embeddings have no weights: a long context costs nothing until used


def _shared() -> dict:
    """Settings every tiny model has: the built-in tokenizer's vocabulary and special ids."""
    return {
        "vocab_size": len(VOCABULARY),
        "pad_token_id": VOCABULARY.index(PAD),
        "bos_token_id": VOCABULARY.index(BOS),
        "eos_token_id": VOCABULARY.index(EOS),
        "max_position_embeddings": MAX_POSITIONS,
        "tie_word_embeddings": True,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
    }


def tiny_small_config() -> LlamaConfig:
    return LlamaConfig(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=192,
        **_shared(),
    )


def tiny_medium_config() -> LlamaConfig:
    return LlamaConfig(
        hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=192,
        **_shared(),
    )


def tiny_large_config() -> LlamaConfig:
    return LlamaConfig(
        hidden_size=192, num_hidden_layers=6, num_attention_heads=6, num_key_value_heads=2, intermediate_size=384,
        **_shared(),
    )


TINY_MODELS: dict[str, Callable[[], PretrainedConfig]] = {
    "tiny-small": tiny_small_config,
    "tiny-medium": tiny_medium_config,
    "tiny-large": tiny_large_config,
}


def build_tiny_model(name: str, *, seed: int = 0) -> PreTrainedModel:
    """A tiny model with random weights drawn from ``seed``: the same name and seed give the same weights.

    The caller's global RNG state is left as it was, and threads building models at once get the same
    weights as alone (``seeding.py``). Raises ``KeyError`` for an unknown name
    (``load_policy`` turns that into ``UnknownModelError``).
    """
    config = TINY_MODELS[name]()
    config._name_or_path = name  # what peft records as the adapter's base model
    with seeded(seed):  # CPU RNG only (the weights are created on the CPU), one thread at a time
        model = AutoModelForCausalLM.from_config(config)
    return model.eval()
