"""The two kinds of line a node's ``metrics.jsonl`` holds, told apart by their keys: what its readers (the
demo's view, the dashboard) need to know of the file without importing the loop that writes it.

- a step record (``metrics.py``'s ``report_record``, one per round) carries ``own_groups``;
- an evaluation record (``evaluation/periodic_eval.py``'s ``eval_record``) carries ``eval_total`` and no ``own_groups``.
"""

from collections.abc import Mapping
from typing import Any

Record = Mapping[str, Any]


def is_step(record: Record) -> bool:
    return "own_groups" in record


def is_evaluation(record: Record) -> bool:
    return "eval_total" in record and not is_step(record)
