"""A model in a GGUF file (llama.cpp's format) as a Hugging Face folder: converted once, then loaded like any other.

    from ftis.node.models.gguf import convert_gguf, gguf_folder
    convert_gguf("SmolLM2-135M-Instruct.Q4_1.gguf", "models/smollm2", licence_files=["LICENSE"])
    folder = gguf_folder("x.gguf")   # $FTIS_CACHE/models/gguf-<sha256 prefix>/, converted the first time only

A GGUF file holds the weights (usually quantized in blocks: Q4_1, Q4_K_M, ...), the architecture's settings and
the tokenizer (vocabulary, merges, special tokens, chat template) as metadata. Transformers reads all of it
(``from_pretrained(..., gguf_file=...)``), dequantizing every block, but a model loaded that way refuses
``save_pretrained`` and takes about a minute to load on 2 cores (SmolLM2-135M ~35 s, Gemma 3 270M ~86 s), so a
node converts a file once and loads the folder afterwards (1–7 s).

What ``convert_gguf`` writes into the folder:
- ``config.json``, ``generation_config.json``, ``model.safetensors``: the dequantized weights in float32, as the
  dequantizer computes them (bfloat16 would round them again); a node may still load the folder in either;
- the tokenizer, and the chat template when the file has one;
- the licence files it is given (they must travel with the weights), and ``SOURCE``: the file, its sha256,
  where it came from and what was done to it;
- ``ftis-model.json``, the manifest: the source file's name, size and sha256, the licence the file's metadata
  names (``general.license``), the licence files the folder must carry, the architecture, parameter count and
  dtype, the versions that converted it, and the logit check below. ``loading.py`` refuses a folder whose
  manifest names a licence file that is not there (``check_licence_files``), before reading anything else.

Before the folder is put in place it is loaded back and checked against the model read from the GGUF file: the
same tokenizer fingerprint, and the same logits on a short prompt (``LOGIT_TOLERANCE``). It is written into a
staging folder beside the target and renamed over it (``atomic.replace_folder``): a folder is whole or absent,
and a file that cannot be read or converted leaves nothing behind.
"""

import hashlib
import json
import os
import shutil
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

from ftis.node.atomic import replace_folder
from ftis.node.models.errors import ModelLoadError
from ftis.node.models.quiet import errors_only, no_progress_bars
from ftis.node.models.tokenizer import tokenizer_fingerprint

MANIFEST = "ftis-model.json"
MANIFEST_FORMAT = 1
SOURCE_NOTE = "SOURCE"
GGUF_FOLDER_PREFIX = "gguf-"
DIGEST_PREFIX = 16  # hex digits of the file's sha256 that name its folder in the cache
CHECK_PROMPT = "The capital of France is"
LOGIT_TOLERANCE = 1e-4  # both sides are the same float32 weights through the same code: equal in practice
METADATA_KEYS = ("general.architecture", "general.name", "general.license", "general.license.name",
                 "general.license.link")


class GgufError(ModelLoadError):
    """A GGUF file that cannot be read or converted (nothing was written)."""


class LicenceFileMissing(ModelLoadError):
    """A converted folder without one of the licence files its manifest says it must carry."""


@dataclass(frozen=True)
class GgufSource:
    """What the manifest records of the file a folder was converted from."""

    path: Path
    sha256: str
    metadata: dict[str, Any]  # the METADATA_KEYS the file has

    @property
    def licence(self) -> str | None:
        return self.metadata.get("general.license") or self.metadata.get("general.license.name")


def model_cache() -> Path:
    """Where converted models live: ``$FTIS_CACHE/models``, else ``~/.cache/ftis-node/models`` (the named ones of
    ``real.py`` and the ``gguf-*`` folders of files given as ``--model``)."""
    return Path(os.environ.get("FTIS_CACHE") or Path.home() / ".cache" / "ftis-node").expanduser() / "models"


def gguf_folder(gguf_path: str | Path) -> Path:
    """The converted folder of the GGUF file ``gguf_path`` in the cache (named by its content's sha256), converted
    now if it is not there yet, with a line on stderr saying so."""
    path = Path(gguf_path).expanduser()
    digest = file_sha256(path)
    folder = model_cache() / f"{GGUF_FOLDER_PREFIX}{digest[:DIGEST_PREFIX]}"
    if is_converted(folder):
        return folder
    read_gguf_metadata(path)  # a file that is no GGUF fails here, before the line that says it is converted
    print(f"converting {path.name} to a Hugging Face folder (first time only, about a minute): {folder}",
          file=sys.stderr, flush=True)
    return convert_gguf(path, folder, sha256=digest)


def convert_gguf(
    gguf_path: str | Path,
    folder: str | Path,
    *,
    licence_files: Sequence[str | Path] = (),
    origin: str | None = None,
    sha256: str | None = None,
) -> Path:
    """Convert the GGUF file ``gguf_path`` into the Hugging Face folder ``folder`` (an earlier conversion there is
    replaced; any other folder is not: ``FileExistsError``); returns it.

    ``licence_files`` are copied beside the weights and named in the manifest as files the folder must carry;
    ``origin`` says where the file came from (``SOURCE``); ``sha256`` is the file's, when the caller has it.
    ``GgufError`` when the file cannot be read or converted, or the folder does not reload the same."""
    source_path = Path(gguf_path).expanduser().absolute()
    folder = Path(folder).expanduser().absolute()
    if folder.exists() and not (folder / MANIFEST).is_file():
        raise FileExistsError(f"{folder} exists and is not a converted model ({MANIFEST} missing): not replacing it")
    licences = [Path(file).expanduser() for file in licence_files]
    for file in licences:
        if not file.is_file():
            raise FileNotFoundError(f"licence file {file} not found")
    if len({file.name for file in licences}) != len(licences):
        raise ValueError(f"two licence files share a name: {[str(file) for file in licences]}")
    source = GgufSource(source_path, sha256 or file_sha256(source_path), read_gguf_metadata(source_path))
    model, tokenizer = _load_gguf(source_path)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = folder.with_name(f".{folder.name}.tmp-{uuid.uuid4().hex[:8]}")
    staging.mkdir()
    try:
        _save(model, tokenizer, staging)
        for file in licences:
            shutil.copyfile(file, staging / file.name)
        difference = _check_reload(staging, model, tokenizer, source_path)
        (staging / SOURCE_NOTE).write_text(_source_note(source, origin))
        manifest = _manifest(source, origin, [file.name for file in licences], model, difference)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")  # last: a folder with it is whole
        replace_folder(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return folder


def read_manifest(folder: str | Path) -> dict[str, Any] | None:
    """The manifest of a converted folder; None for a folder that was not converted from a GGUF file."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ModelLoadError(f"{path} cannot be read: {error}") from error
    if not isinstance(manifest, dict) or not isinstance(manifest.get("licence_files", []), list):
        raise ModelLoadError(f"{path} is not a manifest this node wrote (no list of licence files)")
    return manifest


def check_licence_files(folder: str | Path) -> None:
    """``LicenceFileMissing`` when ``folder`` was converted from a GGUF file and lacks a licence file its manifest
    names: its weights may only be passed on with them, so the folder is refused as a whole."""
    manifest = read_manifest(folder)
    if manifest is None:
        return
    for name in manifest.get("licence_files", []):
        if not (Path(folder) / name).is_file():
            raise LicenceFileMissing(
                f"{folder} has a licence file missing: {name} (its licence, {manifest.get('licence')}, requires "
                "it beside the weights; put it back, or convert the model again: `ftis-node models fetch "
                "NAME` for a real model by name, docs/models.md)"
            )


def is_converted(folder: str | Path) -> bool:
    """Whether ``folder`` is a whole converted folder: its manifest and every licence file the manifest names."""
    try:
        manifest = read_manifest(folder)
    except ModelLoadError:
        return False
    return manifest is not None and all((Path(folder) / name).is_file() for name in manifest.get("licence_files", []))


def read_gguf_metadata(path: Path) -> dict[str, Any]:
    """The ``METADATA_KEYS`` the GGUF file ``path`` has; ``GgufError`` when it is not a readable GGUF file."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise GgufError("reading a GGUF file needs the gguf package: pip install gguf") from None
    try:
        reader = GGUFReader(str(path))
        fields = {key: reader.get_field(key) for key in METADATA_KEYS}
        metadata = {key: field.contents() for key, field in fields.items() if field is not None}
    except Exception as error:  # a truncated or foreign file fails in many ways: magic, offsets, shapes
        raise GgufError(f"{path} cannot be read as a GGUF file ({path.stat().st_size:,} bytes: cut short, or not "
                        f"GGUF): {error}") from error
    if "general.architecture" not in metadata:
        raise GgufError(f"{path} cannot be read as a GGUF file: it names no architecture (general.architecture)")
    return metadata


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _load_gguf(path: Path) -> tuple[Any, Any]:
    """Model (float32) and tokenizer as transformers reads them from the file; ``GgufError`` when it cannot."""
    with no_progress_bars(), errors_only():
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
        except Exception as error:  # an architecture transformers cannot read, tensors past the end of the file, ...
            raise GgufError(f"{path} cannot be converted: {type(error).__name__}: {error}") from error
    return model.eval(), tokenizer


def _save(model: Any, tokenizer: Any, staging: Path) -> None:
    """Save the GGUF-loaded model as a plain float32 model: transformers marks it quantized (its GGUF quantizer and
    ``quantization_config``) and refuses to serialise it, though its weights are already dequantized tensors."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    with no_progress_bars():
        model.save_pretrained(str(staging))
        tokenizer.save_pretrained(str(staging))


def _check_reload(staging: Path, model: Any, tokenizer: Any, source: Path) -> float:
    """The staged folder loaded back: ``GgufError`` unless its tokenizer has the same fingerprint and its logits on
    ``CHECK_PROMPT`` are the GGUF-loaded model's; returns the largest logit difference."""
    with no_progress_bars():
        reloaded_tokenizer = AutoTokenizer.from_pretrained(str(staging))
        reloaded = AutoModelForCausalLM.from_pretrained(str(staging), dtype=torch.float32).eval()
    if tokenizer_fingerprint(reloaded_tokenizer) != tokenizer_fingerprint(tokenizer):
        raise GgufError(f"the folder converted from {source} reloads its tokenizer with other ids")
    ids = torch.tensor([tokenizer(CHECK_PROMPT)["input_ids"]])  # (1, T)
    with torch.no_grad():
        difference = (model(input_ids=ids).logits - reloaded(input_ids=ids).logits).abs().max().item()
    if not difference <= LOGIT_TOLERANCE:  # also a NaN
        raise GgufError(f"the folder converted from {source} gives other logits than the file "
                        f"(largest difference {difference:g} on {CHECK_PROMPT!r})")
    return difference


def _manifest(source: GgufSource, origin: str | None, licence_files: list[str], model: Any,
              difference: float) -> dict[str, Any]:
    return {
        "format": MANIFEST_FORMAT,
        "source": {"file": source.path.name, "bytes": source.path.stat().st_size, "sha256": source.sha256,
                   "origin": origin, "name": source.metadata.get("general.name")},
        "licence": source.licence,
        "licence_link": source.metadata.get("general.license.link"),
        "licence_files": licence_files,
        "architecture": type(model).__name__,
        "parameters": sum(parameter.numel() for parameter in model.parameters()),
        "dtype": "float32",
        "converted_with": {"transformers": transformers.__version__, "ftis-node": _own_version()},
        "logit_check": {"prompt": CHECK_PROMPT, "largest_difference": difference},
    }


def _source_note(source: GgufSource, origin: str | None) -> str:
    lines = [
        f"Converted from the GGUF file {source.path.name} ({source.path.stat().st_size:,} bytes, "
        f"sha256 {source.sha256}).",
        *([f"Where the file came from: {origin}"] if origin else []),
        f"Its licence, as its metadata names it: {source.licence or 'not named'}.",
        "What was done to it: transformers' GGUF reader (transformers "
        f"{transformers.__version__}) dequantized its weights to float32; they were saved, with its tokenizer, as a "
        f"Hugging Face folder by ftis-node {_own_version()} (ftis.node.models.gguf.convert_gguf), which checked "
        f"that the folder gives the file's logits on {CHECK_PROMPT!r}.",
    ]
    return "\n".join(lines) + "\n"


def _own_version() -> str:
    try:
        return version("ftis-node")
    except PackageNotFoundError:
        return "unknown"
