"""Replacing a folder or a file in one step: a reader (or a crash) sees the old one or the new one, never
a half-written one. Folders: the Hugging Face export and checkpoints, both written whole into a staging
folder beside the target first. Files: the experiment's cells and report, a node's ``peers.json``."""

import os
import shutil
import uuid
from pathlib import Path


def replace_folder(staging: Path, target: Path) -> None:
    """Rename ``staging`` to ``target``. A folder cannot be renamed over a non-empty one, so an existing
    ``target`` is renamed aside first (and put back if the rename fails), then deleted once the new one is
    in place; between the two renames ``target`` is briefly absent. The parent is fsynced so the rename
    survives a power cut."""
    aside = None
    if target.exists():
        aside = target.with_name(f".old-{target.name}-{uuid.uuid4().hex[:8]}")
        os.rename(target, aside)
    try:
        os.rename(staging, target)
    except BaseException:
        if aside is not None:
            os.rename(aside, target)
        raise
    fsync_folder(target.parent)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def write_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder, flushed to disk and renamed
    over ``path``; the folder is created if need be."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with open(staging, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staging, path)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    return path


def fsync_folder(path: Path) -> None:
    """Make the entries of the folder ``path`` (renames into it) durable."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
