"""Node utilisation: the breakdown of a round's wall time adds up, reaches metrics.jsonl and TensorBoard's
tags, and evaluating inside the round (after the publish) trains on exactly what evaluating before it did."""

import json
import math

import pytest
import torch
from helpers.metrics_fakes import report
from helpers.nodes import make_node
from helpers.swarm import FakeClock

from ftis.node.records.metrics import report_record, tensorboard_scalars
from ftis.node.records.utilisation import (
    LOOP_PARTS,
    OTHER,
    PARTS,
    ROUND_PARTS,
    LoopClock,
    LoopLap,
    Stopwatch,
    laps_of,
    make_lap,
    work_share,
)
from ftis.node.swarm.memory import MemoryHub


def test_a_stopwatch_sums_each_part_over_its_runs():
    clock = FakeClock(100.0)
    watch = Stopwatch(clock)
    for seconds in (1.0, 2.5):
        with watch.part("train"):
            clock.now += seconds
    with pytest.raises(KeyError), watch.part("generate"):  # a part that raises is still timed
        clock.now += 0.5
        raise KeyError("boom")
    assert watch.seconds == {"train": 3.5, "generate": 0.5}


def test_laps_tile_the_loop_and_loop_work_lands_in_the_next_lap():
    clock = FakeClock(100.0)
    loop = LoopClock(clock)
    clock.now += 4.0  # round 0: generate 1, train 2, the rest unmeasured
    first = loop.lap({"generate": 1.0, "train": 2.0})
    with loop.part("metrics"):  # round 0's record, then a checkpoint after it
        clock.now += 0.25
    with loop.part("checkpoint"):
        clock.now += 0.75
    clock.now += 3.0
    second = loop.lap({"generate": 1.0, "train": 2.0})
    assert (first.seconds, second.seconds) == (4.0, 4.0)  # 8 s of wall time, each second in one lap
    assert first.parts["metrics"] == 0 and second.parts["metrics"] == 0.25 and second.parts["checkpoint"] == 0.75
    assert first.parts[OTHER] == 1.0 and second.parts[OTHER] == 0.0
    assert set(first.parts) == set(PARTS) == {*ROUND_PARTS, *LOOP_PARTS, OTHER}
    assert first.utilisation == second.utilisation == 0.75
    assert work_share([first, second]) == 0.75
    assert work_share([first, second], excluding=("checkpoint",)) == 6.0 / 7.25


def test_a_lap_refuses_unknown_parts_and_never_has_negative_rest():
    with pytest.raises(ValueError, match="unknown parts"):
        make_lap(1.0, {"dreaming": 0.5})
    rounded = make_lap(1.0, {"generate": 0.6, "train": 0.4000001})  # measured inside the lap: only rounding
    assert rounded.parts[OTHER] == 0.0 and rounded.utilisation == 1.0
    assert work_share([]) == 0.0 and LoopLap(0.0, rounded.parts).utilisation == 0.0


def test_the_record_carries_the_breakdown_and_tensorboard_shows_it():
    lap = make_lap(2.0, {"generate": 0.5, "train": 1.0, "collect": 0.25})
    record = lap.record()
    assert record["loop_seconds"] == 2.0 and record["utilisation"] == 0.75
    assert record["loop_collect_seconds"] == 0.25 and record["loop_other_seconds"] == 0.25
    assert laps_of([record, {"round": 3}]) == [lap]  # a record without a lap (an older node) is skipped
    step = report_record(report(), loop=lap)
    assert {key: step[key] for key in record} == record
    scalars = tensorboard_scalars(step)
    assert scalars["loop/utilisation"] == 0.75 and scalars["loop/seconds"] == 2.0
    assert scalars["loop/generate_seconds"] == 0.5 and scalars["loop/other_seconds"] == 0.25
    assert "utilisation" not in report_record(report())  # a round the run loop did not time


def test_a_node_run_records_a_breakdown_that_adds_up(tmp_path):
    from ftis.node.runner.join import run_node

    node = make_node(MemoryHub(), "solo", eval={"every": 2, "split": "train", "limit": 4, "max_new_tokens": 2},
                     metrics={"display": "lines", "tensorboard": False})
    run_node(node, rounds=3, out=tmp_path, echo=lambda line: None)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "own_groups" in r]
    assert [r["round"] for r in steps] == [0, 1, 2]
    for step in steps:
        parts = [step[f"loop_{name}_seconds"] for name in PARTS]
        assert all(0.0 <= part <= step["loop_seconds"] for part in parts)
        assert math.isclose(sum(parts), step["loop_seconds"], rel_tol=1e-9, abs_tol=1e-9)
        assert 0.0 < step["utilisation"] <= 1.0
        assert step["loop_generate_seconds"] > 0 and step["loop_train_seconds"] > 0
    evals = [step["loop_eval_seconds"] for step in steps]  # rounds 0 and 2 evaluated; round 1 only asked
    assert evals[1] < min(evals[0], evals[2])
    assert steps[1]["loop_metrics_seconds"] > 0  # round 0's record was written inside round 1's lap


def _weights(node) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in node.policy.model.state_dict().items()}


def test_evaluating_after_the_publish_trains_exactly_as_evaluating_before_the_round():
    from ftis.node.evaluation.evaluation import evaluate

    def run(inside: bool) -> tuple[list, list[float], dict[str, torch.Tensor]]:
        hub = MemoryHub()
        nodes = [make_node(hub, "a", seed=0), make_node(hub, "b", model="tiny-medium", adapter="lora", seed=1)]
        trained, accuracies = [], []
        for _ in range(3):
            for node in nodes:  # node a evaluates every round; b is its peer
                def evaluate_a(node=node) -> None:
                    accuracies.append(evaluate(node.policy, node.task, "train", limit=4, max_new_tokens=3).accuracy)

                if node is nodes[0] and not inside:
                    evaluate_a()
                report = node.run_round(evaluate_a if node is nodes[0] and inside else None)
                trained.append((report.step.loss, report.step.tokens, report.peer_groups_used))
                if node is nodes[0]:
                    assert ("eval" in report.seconds) is inside
        return trained, accuracies, _weights(nodes[0])

    before, inside = run(inside=False), run(inside=True)
    assert before[0] == inside[0]  # the same steps, on the same groups
    assert before[1] == inside[1]  # the same weights evaluated: the round's, before its step
    assert all(torch.equal(before[2][name], inside[2][name]) for name in before[2])


def test_a_node_stopped_during_its_evaluation_keeps_the_last_completed_round():
    node = make_node(MemoryHub(), "solo")
    node.run_round()
    weights, version = _weights(node), node.trainer.policy_version

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        node.run_round(interrupted)
    state = node.state_dict()  # what a checkpoint saves: round 1 done, no step of round 1 taken
    assert node.round == 1 and state.round == 1 and state.trainer["policy_version"] == version
    assert all(torch.equal(weights[name], tensor) for name, tensor in _weights(node).items())
    resumed = make_node(MemoryHub(), "solo")  # a new process resuming from that state runs the round again
    resumed.policy.model.load_state_dict(weights)
    resumed.load_state_dict(state)
    assert resumed.run_round().round == 1 and resumed.trainer.policy_version == version + 1
