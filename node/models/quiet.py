"""Transformers' output off for a moment. Progress bars (``no_progress_bars``): loading or saving a local folder is
quick, and a node does it often (exports, checkpoints, cached warm starts), so the bars would only be noise in its
log; downloads from the hub keep theirs, which can take minutes. Warnings (``errors_only``): reading a GGUF file,
transformers reports every metadata field it has no use for."""

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


@contextlib.contextmanager
def errors_only() -> Iterator[None]:
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
