"""The real pretrained models in tests, and a tiny GGUF file written here.

``real_model(name)`` is the folder ``models fetch`` wrote (``ftis.node.models.real``); without it the test
is skipped with the command to run, or fails under ``FTIS_REQUIRE_REAL_MODELS=1`` (``.ci/run`` sets it, so CI
cannot pass by skipping).

``write_tiny_gguf(path)``: a GGUF file in llama.cpp's layout as its converter writes a Llama model (the tensor
names, the metadata keys, a byte-level BPE tokenizer with a chat template), with random float32 weights and 261
tokens: 31 KB, which transformers reads in well under a second, so the path of ``--model x.gguf`` (conversion,
the cache named by the file's hash, reuse) is tested without a real model's minute of dequantizing.
"""

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from ftis.node.models.real import real_model_folder

REQUIRE = "FTIS_REQUIRE_REAL_MODELS"
TINY_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1 (bos), 2 (eos)
TINY_MERGES = ["1 2", "3 4"]
TINY_CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"


def real_model(name: str) -> Path:
    """The folder of the real model ``name``; skips the test (fails under FTIS_REQUIRE_REAL_MODELS=1) when
    ``ftis-node models fetch --all`` has not been run."""
    return found_or_skipped(real_model_folder, name, REQUIRE)


def found_or_skipped(find: Callable[[str], Path], name: str, require: str) -> Path:
    """``find(name)``, a folder a CI script writes; when it raises ``FileNotFoundError`` (whose message says what to
    run), the test is skipped, or fails where the environment variable ``require`` is "1" (CI sets it)."""
    try:
        return find(name)
    except FileNotFoundError as missing:
        if os.environ.get(require) == "1":
            pytest.fail(f"{missing} ({require}=1)")
        pytest.skip(str(missing))


def write_tiny_gguf(path: Path, *, licence: str = "mit", hidden: int = 16, mlp: int = 32, seed: int = 0) -> Path:
    """A one-layer Llama (2 query heads, 1 key/value head) on a 261-token byte-level BPE, as a GGUF file."""
    from gguf import GGUFWriter
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tokens = TINY_SPECIALS + list(bytes_to_unicode().values()) + [merge.replace(" ", "") for merge in TINY_MERGES]
    heads, kv_heads = 2, 1
    head_dim = hidden // heads
    writer = GGUFWriter(str(path), "llama")
    writer.add_name("tiny test model")
    writer.add_license(licence)
    writer.add_context_length(256)
    writer.add_embedding_length(hidden)
    writer.add_block_count(1)
    writer.add_feed_forward_length(mlp)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([3] * len(TINY_SPECIALS) + [1] * (len(tokens) - len(TINY_SPECIALS)))  # control, normal
    writer.add_token_merges(TINY_MERGES)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(TINY_CHAT_TEMPLATE)
    rng = np.random.default_rng(seed)
    kv = kv_heads * head_dim
    shapes = {"token_embd.weight": (len(tokens), hidden), "blk.0.attn_q.weight": (hidden, hidden),
              "blk.0.attn_k.weight": (kv, hidden), "blk.0.attn_v.weight": (kv, hidden),
              "blk.0.attn_output.weight": (hidden, hidden), "blk.0.ffn_gate.weight": (mlp, hidden),
              "blk.0.ffn_up.weight": (mlp, hidden), "blk.0.ffn_down.weight": (hidden, mlp)}
    for name, shape in shapes.items():
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.1).astype(np.float32))
    for name in ("output_norm.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"):
        writer.add_tensor(name, np.ones(hidden, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
