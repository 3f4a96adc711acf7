"""Transformers' progress bars off for a moment: loading or saving a local folder is quick, and a node
does it often (exports, checkpoints, cached warm starts), so the bars would only be noise in its log.
Downloads from the hub keep theirs: those can take minutes."""

import contextlib
from collections.abc import Iterator

from transformers.utils import logging as hf_logging


@contextlib.contextmanager
def no_progress_bars() -> Iterator[None]:
    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()
