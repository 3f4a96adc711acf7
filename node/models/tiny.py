"""Built-in tiny causal LMs for CPU runs and tests: nothing is downloaded.

    from ftis.node.models.tiny import build_tiny_model, build_tiny_tokenizer
    model = build_tiny_model("tiny-medium", seed=0)  # ~0.5M parameters, random weights
    tokenizer = build_tiny_tokenizer("tiny-medium")  # the character tokenizer

Three sizes share the built-in character tokenizer (``tokenizer.py``), as Qwen2.5-1.5B and -3B share
theirs, so their token ids mean the same and they can train on each other's samples. ``tiny-small-bpe``
is tiny-small's architecture on the built-in BPE tokenizer (``bpe_tokenizer.py``: the same characters,
plus digit pairs and prompt words as single tokens): a peer whose ids mean something else, for
collaboration across tokenizers.

| name               | tokenizer        | architecture | hidden | layers | heads (kv) | MLP | parameters |
|--------------------|------------------|--------------|--------|--------|------------|-----|------------|
| ``tiny-small``     | character (105)  | Llama        | 64     | 2      | 4 (2)      | 192 | 105,344    |
| ``tiny-medium``    | character (105)  | Llama        | 128    | 4      | 4 (2)      | 192 | 506,112    |
| ``tiny-large``     | character (105)  | Llama        | 192    | 6      | 6 (2)      | 384 | 1,939,584  |
| ``tiny-small-bpe`` | BPE (247)        | Llama        | 64     | 2      | 4 (2)      | 192 | 114,432    |

Input and output embeddings are tied (as in Qwen2.5 ≤ 3B) and dropout is zero, so a model's log-probs
are a pure function of its weights, which the importance ratios rely on. The vocabulary size and the
special ids of a model's config are read from its tokenizer, so the two always agree.

Why Llama and not Qwen2: for a folder whose config says ``qwen2``, transformers 5's ``AutoTokenizer``
ignores the saved tokenizer class and builds a ``Qwen2Tokenizer`` (a byte-level pipeline) from the
vocabulary, which silently changes the ids of the built-in tokenizers. A Llama folder loads
the saved ``tokenizer.json`` as it is, in this package and in anything else that uses AutoTokenizer.
"""

from collections.abc import Callable
from dataclasses import dataclass

from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedModel, PreTrainedTokenizerFast

from ftis.node.models.bpe_tokenizer import build_bpe_tokenizer
from ftis.node.models.seeding import seeded
from ftis.node.models.tokenizer import build_tokenizer

MAX_POSITIONS = 2048  # rotary embeddings have no weights: a long context costs nothing until used


@dataclass(frozen=True)
class Shape:
    """A tiny model's architecture, apart from its vocabulary."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    mlp: int


@dataclass(frozen=True)
class TinyModel:
    shape: Shape
    tokenizer: Callable[[], PreTrainedTokenizerFast]  # builds the model's tokenizer (deterministic, in code)

    def config(self) -> LlamaConfig:
        """The model's config: its shape, and its tokenizer's vocabulary size and special ids."""
        tokenizer = self.tokenizer()
        return LlamaConfig(
            hidden_size=self.shape.hidden, num_hidden_layers=self.shape.layers,
            num_attention_heads=self.shape.heads, num_key_value_heads=self.shape.kv_heads,
            intermediate_size=self.shape.mlp,
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            max_position_embeddings=MAX_POSITIONS,
            tie_word_embeddings=True,
            attention_dropout=0.0,
            initializer_range=0.02,
        )


SMALL = Shape(hidden=64, layers=2, heads=4, kv_heads=2, mlp=192)
MEDIUM = Shape(hidden=128, layers=4, heads=4, kv_heads=2, mlp=192)
LARGE = Shape(hidden=192, layers=6, heads=6, kv_heads=2, mlp=384)

TINY_MODELS: dict[str, TinyModel] = {
    "tiny-small": TinyModel(SMALL, build_tokenizer),
    "tiny-medium": TinyModel(MEDIUM, build_tokenizer),
    "tiny-large": TinyModel(LARGE, build_tokenizer),
    "tiny-small-bpe": TinyModel(SMALL, build_bpe_tokenizer),
}


def build_tiny_tokenizer(name: str) -> PreTrainedTokenizerFast:
    """The tokenizer of tiny model ``name``. Raises ``KeyError`` for an unknown name."""
    return TINY_MODELS[name].tokenizer()


def build_tiny_model(name: str, *, seed: int = 0) -> PreTrainedModel:
    """A tiny model with random weights drawn from ``seed``: the same name and seed give the same weights.

    The caller's global RNG state is left as it was, and threads building models at once get the same
    weights as alone (``seeding.py``). Raises ``KeyError`` for an unknown name
    (``load_policy`` turns that into ``UnknownModelError``).
    """
    config = TINY_MODELS[name].config()
    config._name_or_path = name  # what peft records as the adapter's base model
    with seeded(seed):  # CPU RNG only (the weights are created on the CPU), one thread at a time
        model = AutoModelForCausalLM.from_config(config)
    return model.eval()
