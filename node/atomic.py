"""Replacing a folder in one step: a reader (or a crash) sees the old folder or the new one, never a
half-written one. Used by the Hugging Face export and by checkpoints, which are both written whole into
a staging folder beside the target first."""

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


def fsync_folder(path: Path) -> None:
    """Make the entries of the folder ``path`` (renames into it) durable."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
