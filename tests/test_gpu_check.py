"""The prepared GPU check (``benchmarks/gpu_check.py``) runs end to end against the vLLM stand-in, so it
cannot rot between the sessions that have a GPU. What it says about vLLM is only known on a GPU.

Run: python -m pytest tests/test_gpu_check.py -q
"""

import argparse
import importlib.util
from pathlib import Path

import pytest
import vllm_stand_in

_SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.py"
_spec = importlib.util.spec_from_file_location("gpu_check", _SCRIPT)
gpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)


@pytest.mark.parametrize("adapter", ["full", "lora"])
def test_every_check_of_the_gpu_check_passes_on_the_stand_in(adapter, monkeypatch, capsys):
    vllm_stand_in.install(monkeypatch)
    args = argparse.Namespace(size="tiny", device="cpu", stand_in=True, prompts=3, group_size=3, prompt_tokens=6,
                              max_new_tokens=8, steps=1, lr=None, gpu_memory_utilization=0.3)
    checks = gpu_check.run_part(adapter, args)
    printed = capsys.readouterr().out
    assert [c.name.split(":")[0] for c in checks] == [
        "T=1.0", "T=0.7", "T=1.0 top-p 0.9", "step 1"], printed
    assert all(c.passed for c in checks), printed
    assert "throughput: generation" in printed
