"""It still learns: the demo's small node, alone, through the node's own code (``benchmarks/learning.py``'s
``run_job``: ``build_node``, ``Node.run_round`` on an in-memory transport), from the demo's warm start.

What is asserted, and why it can fail: 150 GRPO rounds raise held-out greedy accuracy on 300 distinct
test problems by at least 8 points and the sampling accuracy of the last 30 rounds over the first 30 by at
least 1.5 points. Measured (2026-12-01, seeds 0–2, 500 problems): +16.8 to +19.8 points held out, sampling
25 → 29. One evaluation's standard error is ~2.7 points at 300 problems, and both evaluations score the
same problems, so 8 points is far outside the noise yet well inside what GRPO gives. The control makes the
same run with a learning rate of 1e-12 (the weights barely move): it must fail both margins, which shows
that the margins separate learning from luck. A change that stops learning (a sign flipped in the loss,
advantages zeroed, the optimizer step skipped) turns this red.

The warm start is trained here (about 50 s on one thread, cached in a temporary folder for the module).
"""

import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROUNDS = 150
MIN_HELD_OUT_GAIN = 0.08
MIN_SAMPLING_GAIN = 0.015


@pytest.fixture(scope="module")
def learning(tmp_path_factory):
    """``benchmarks.learning`` with the warm-up cache in a temporary folder."""
    patch = pytest.MonkeyPatch()
    patch.syspath_prepend(str(REPO))
    patch.setenv("FTIS_CACHE", str(tmp_path_factory.mktemp("cache")))
    import torch

    threads = torch.get_num_threads()
    yield importlib.import_module("benchmarks.learning")
    torch.set_num_threads(threads)  # run_job uses one thread, as the demo's nodes do
    patch.undo()


def gains(record: dict) -> tuple[float, float]:
    """Held-out gain (last evaluation minus the first) and sampling gain (last 30 rounds minus first 30)."""
    first, last = record["evaluations"][0], record["evaluations"][-1]
    rewards = record["own_reward"]
    return last["accuracy"] - first["accuracy"], sum(rewards[-30:]) / 30 - sum(rewards[:30]) / 30


def job(learning, overrides=()):
    return learning.Job("small", seed=0, rounds=ROUNDS, eval_every=ROUNDS, eval_problems=300,
                        overrides=tuple(overrides), supervised_control=0)


def test_grpo_raises_held_out_and_sampling_accuracy_well_outside_the_noise(learning):
    record = learning.run_job(job(learning))
    held_out, sampling = gains(record)
    start = record["evaluations"][0]
    assert 0.2 <= start["accuracy"] <= 0.5, start  # the warm start leaves room, as the demo's recipe intends
    assert held_out >= MIN_HELD_OUT_GAIN, (held_out, record["evaluations"])
    assert sampling >= MIN_SAMPLING_GAIN, (sampling, record["own_reward"])


def test_the_same_run_without_learning_fails_both_margins(learning):
    record = learning.run_job(job(learning, [("trainer.learning_rate", 1e-12)]))
    held_out, sampling = gains(record)
    assert held_out < MIN_HELD_OUT_GAIN / 2, (held_out, record["evaluations"])
    assert sampling < MIN_SAMPLING_GAIN, (sampling, record["own_reward"])
