"""ftis.protocol stands alone: importing it and encoding/decoding a batch loads neither torch nor
hivemind (its package docstring promises this, so a dashboard or another implementation can use it).

Run: python -m pytest tests/test_protocol_isolation.py -q

The check runs in a fresh interpreter, because this test process may have imported torch already.
"""

import json
import subprocess
import sys

HEAVY = ["torch", "hivemind", "transformers", "peft", "datasets", "ftis.node"]

SCRIPT = """
import json, sys
import numpy as np
import ftis.protocol as p

completion = p.Completion(np.array([1, 2, 3]), np.array([-0.5, 0.0, -2.0]), 1.0, "stop")
group = p.Group("g0", p.TaskRef("arith", "train", 0, "6"), np.array([4, 5]), (completion,))
batch = p.RolloutBatch("run", "peer", 0, 1.7e9, p.PolicyInfo("m", "", "full", 0), p.TokenizerInfo("f", 200),
                       p.SamplingSettings(1.0, 1.0, 0, 8), (group,))
assert p.decode(p.encode(batch)).groups[0].completions[0].token_ids.tolist() == [1, 2, 3]
print(json.dumps(sorted(sys.modules)))
"""


def test_protocol_loads_no_heavy_dependency():
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    modules = set(json.loads(result.stdout.strip().splitlines()[-1]))
    assert "ftis.protocol" in modules
    loaded = [m for m in HEAVY if m in modules or any(name.startswith(m + ".") for name in modules)]
    assert not loaded, f"importing ftis.protocol loaded {loaded}"
