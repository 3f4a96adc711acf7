"""The output folder's cells: one JSON file per (condition, seed), written atomically, read back checked.

    OUT/cells/<condition>/seed-<s>.json

A file is written to a temporary name in the same folder, flushed to disk and renamed over its final
name, so a grid killed at any moment leaves whole cells or none; the next run skips every cell whose
file is there with the fingerprint of the current settings (``grid.py``). A file with another
fingerprint means the folder holds a grid of other settings: that is refused, never overwritten.
"""

import json
from pathlib import Path
from typing import Any

from ftis.node.atomic import write_atomic
from ftis.node.errors import UserError
from ftis.node.experiment.grid import Cell

CELLS = "cells"


class StoreError(UserError, RuntimeError):
    """A cell file that cannot be used: unreadable, or from other settings; the message says which."""


def cell_path(out: Path, cell: Cell) -> Path:
    return out / CELLS / cell.condition / f"seed-{cell.seed}.json"


def read_cell(out: Path, cell: Cell, fingerprint: str) -> dict[str, Any] | None:
    """The finished cell's record, or None when it has not been run. Raises ``StoreError`` for a file
    that is not a readable record or that was made with other settings."""
    path = cell_path(out, cell)
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        found = record["fingerprint"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise StoreError(f"{path} is not a readable cell record ({error}); delete it to rerun the cell") from None
    if found != fingerprint:
        raise StoreError(f"{path} was made with other settings (fingerprint {found}, these settings {fingerprint}): "
                         "use another --out, or delete the folder's cells")
    return record


def write_cell(out: Path, cell: Cell, record: dict[str, Any]) -> Path:
    """Write ``record`` as the cell's file, atomically."""
    return write_atomic(cell_path(out, cell), json.dumps(record, indent=1, allow_nan=False) + "\n")


