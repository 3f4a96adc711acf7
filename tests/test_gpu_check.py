"""The prepared GPU check (``benchmarks/gpu_check.py``) runs end to end against the vLLM stand-in, so it
cannot rot between the sessions that have a GPU. What it says about vLLM is only known on a GPU.

Run: python -m pytest tests/test_gpu_check.py -q
"""

import importlib.util
import re
from pathlib import Path

import pytest
from helpers import vllm_stand_in

from benchmarks import real_speed

_SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.py"
_spec = importlib.util.spec_from_file_location("gpu_check", _SCRIPT)
gpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)


@pytest.mark.parametrize("adapter", ["full", "lora"])
def test_every_check_of_the_gpu_check_passes_on_the_stand_in(adapter, monkeypatch, capsys):
    vllm_stand_in.install(monkeypatch)
    monkeypatch.setattr(real_speed, "MATRIX", 256)  # the ceiling's products: small on a CPU
    args = gpu_check.arguments().parse_args(["--size", "tiny", "--device", "cpu", "--stand-in", "--prompts", "3",
                                             "--group-size", "3", "--prompt-tokens", "6", "--max-new-tokens", "8",
                                             "--steps", "1"])
    checks = gpu_check.run_part(adapter, args)
    printed = capsys.readouterr().out
    assert [c.name.split(":")[0] for c in checks] == [
        "T=1.0", "T=0.7", "T=1.0 top-p 0.9", "step 1"], printed
    assert all(c.passed for c in checks), printed
    assert re.search(r"ceiling, torch.mm 256² float32 on cpu: [\d,.]+ GFLOP/s", printed), printed
    assert re.search(r"throughput: generation [\d,]+ tokens/s \([\d.]+% of the ceiling.*training [\d,]+ tokens "
                     r"computed/s \([\d.]+% of the ceiling\)", printed), printed
