"""A node's per-step metrics: the flat record (every figure, per-step traffic and
rejections as differences of the transport's cumulative counters), ``metrics.jsonl``, and TensorBoard
event files read back record by record with tensorboardX's own event proto; then a real tiny-model
pair of nodes writing all of it through ``RunMetrics``."""

import json
import math
import struct
from dataclasses import MISSING, asdict, fields, replace
from pathlib import Path

import pytest
from helpers.metrics_fakes import AFTER, BEFORE, PEER_A, PEER_B, report
from tensorboardX.proto.event_pb2 import Event
from tensorboardX.record_writer import masked_crc32c

from ftis.node.config import MetricsConfig, NodeConfig
from ftis.node.records.metrics import MetricsLog, RunMetrics, TensorBoardLog, report_record, tensorboard_scalars
from ftis.node.records.round_report import rejections_by_peer
from ftis.node.swarm.exchange.limits import InboxLimits
from ftis.node.swarm.memory import MemoryHub, MemoryTransport
from ftis.node.trainer.step_figures import FIGURES, PeerFiltered, StepFigures, record_key


def test_record_holds_every_figure_with_per_step_traffic_and_rejections():
    record = report_record(report(transport=AFTER), previous=BEFORE, eval_accuracy=0.4)
    assert record["round"] == 4 and record["eval_accuracy"] == 0.4
    assert (record["own_reward"], record["peer_reward"]) == (0.25, 0.375)
    assert (record["own_groups"], record["peer_groups_used"], record["peer_groups_received"]) == (2, 3, 6)
    assert record["peer_groups_by_peer"] == {PEER_A: 2, PEER_B: 1}
    assert record["generation_tokens_per_s"] == 125.0 and record["train_tokens_per_s"] == 600.0
    assert record["train_filtered_advantage_fraction"] == 0.2 and record["train_filtered_divergence_fraction"] == 0.05
    assert (record["train_is_weight_mean"], record["train_is_weight_max"]) == (1.02, 1.98)
    assert record["train_truncated_fraction"] == 0.01 and record["train_divergence_mean"] == 0.12
    # traffic: this step's difference, and the running totals
    assert (record["bytes_sent"], record["bytes_received"]) == (600, 4096)
    assert (record["batches_sent"], record["batches_received"]) == (1, 2)
    assert (record["bytes_sent_total"], record["bytes_received_total"]) == (1600, 9096)
    # rejections: this step by reason (summed over peers), all of them by reason, and the peers refused
    assert record["rejections"] == {"hash": 1, "stale": 3}  # PEER_A +1 stale, PEER_B +2 stale, +1 hash
    assert record["rejections_total"] == {"hash": 1, "quota": 1, "stale": 5}
    assert record["peers_rejected"] == 2
    assert rejections_by_peer(AFTER.rejections) == {PEER_A: {"stale": 3}, PEER_B: {"hash": 1, "quota": 1, "stale": 2}}


def test_first_record_counts_everything_since_the_start():
    record = report_record(report(transport=BEFORE))
    assert record["bytes_sent"] == 1000 == record["bytes_sent_total"]
    assert record["rejections"] == {"quota": 1, "stale": 2} == record["rejections_total"]
    assert record["eval_accuracy"] is None


def test_jsonl_writes_nan_as_null_and_appends(tmp_path):
    for round_ in (0, 1):
        log = MetricsLog(tmp_path)  # a resumed run opens the file again: it continues it
        log.write(report_record(report(round_, peer_reward=float("nan"))))
        log.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["round"] for r in records] == [0, 1]
    assert records[0]["peer_reward"] is None and records[0]["peers_rejected"] == 0
    assert records[0]["peer_score_min"] is None  # NaN: no peer judged yet


def test_scalars_name_the_figures_and_leave_out_unknown_ones():
    scalars = tensorboard_scalars(report_record(report(transport=AFTER), previous=BEFORE))
    assert scalars["reward/own"] == 0.25 and scalars["filter/fraction"] == 0.25
    assert scalars["is/weight_max"] == pytest.approx(1.98) and scalars["swarm/bytes_received"] == 4096
    assert scalars[f"groups/peer/{PEER_A}"] == 2 and scalars["rejections/stale"] == 3
    assert scalars["rejections/all"] == 4
    assert "eval/accuracy" not in scalars  # no evaluation this step
    idle = tensorboard_scalars(report_record(report(peer_reward=float("nan"), trained=False)))
    assert "reward/peer" not in idle  # NaN: no peer completions
    assert not any(tag.startswith(("is/", "filter/", "divergence/", "train/loss")) for tag in idle)
    assert idle["groups/own"] == 2 and idle["train/policy_version"] == 3


def read_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the folder's event files: tag -> [(step, value)], checking each TFRecord's CRCs."""
    found: dict[str, list[tuple[int, float]]] = {}
    files = sorted(folder.glob("events.out.tfevents.*"))
    assert files, f"no event file in {folder}"
    for path in files:
        data, pos = path.read_bytes(), 0
        while pos < len(data):
            header = data[pos:pos + 8]
            (length,), (header_crc,) = struct.unpack("<Q", header), struct.unpack_from("<I", data, pos + 8)
            payload = data[pos + 12:pos + 12 + length]
            (payload_crc,) = struct.unpack_from("<I", data, pos + 12 + length)
            assert header_crc == masked_crc32c(header) and payload_crc == masked_crc32c(payload)
            event = Event.FromString(payload)
            for value in event.summary.value:
                found.setdefault(value.tag, []).append((event.step, value.simple_value))
            pos += 12 + length + 4
    return found


def test_tensorboard_event_files_hold_the_scalars(tmp_path):
    log = TensorBoardLog(tmp_path / "tensorboard")
    log.write(report_record(report(0, transport=BEFORE)))
    log.write(report_record(report(1, transport=AFTER), previous=BEFORE, eval_accuracy=0.4))
    log.close()
    scalars = read_scalars(tmp_path / "tensorboard")
    assert scalars["reward/own"] == [(0, 0.25), (1, 0.25)]
    assert scalars["swarm/bytes_received"] == [(0, 5000.0), (1, 4096.0)]
    assert scalars["eval/accuracy"] == [(1, pytest.approx(0.4))]
    assert scalars["rejections/stale"] == [(0, 2.0), (1, 3.0)]
    assert scalars["is/weight_mean"][1] == (1, pytest.approx(1.02))
    assert scalars["filter/divergence_fraction"][0] == (0, pytest.approx(0.05))


def test_run_metrics_of_two_real_tiny_nodes(tmp_path):
    """Two tiny-model nodes trade groups over the in-memory transport; the second's outputs hold what
    it received from the first, in the JSONL file, the event files and its summary lines."""
    from ftis.node.runner.join import build_node

    config = NodeConfig.model_validate({
        "model": {"name": "tiny-small"}, "task": {"name": "arithmetic"},
        "generation": {"prompts_per_round": 2, "group_size": 3, "max_new_tokens": 4},
    })
    hub, limits = MemoryHub(), InboxLimits(max_age_s=600, per_peer_quota=8, max_batches=64, max_bytes=10**8)
    first, second = (build_node(config, lambda fp, name=name: MemoryTransport(hub, "ftis-demo", name, fp, limits))
                     for name in ("first", "second"))
    lines: list[str] = []
    metrics = RunMetrics(tmp_path, MetricsConfig(display="lines"), lines.append)
    try:
        for _ in range(2):
            first.run_round()
            metrics.record(second.run_round())
    finally:
        metrics.close()
        first.transport.close()
        second.transport.close()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in records] == [0, 1]
    assert all(r["peer_groups_received"] == 2 and r["bytes_received"] > 0 for r in records)
    assert records[1]["bytes_received_total"] == records[0]["bytes_received"] + records[1]["bytes_received"]
    assert math.isfinite(records[1]["peer_reward"]) and records[1]["generation_tokens_per_s"] > 0
    scalars = read_scalars(tmp_path / "tensorboard")
    assert [step for step, _ in scalars["swarm/bytes_received"]] == [0, 1]
    assert scalars["swarm/bytes_received"][1][1] == records[1]["bytes_received"]
    assert scalars["groups/peer_received"] == [(0, 2.0), (1, 2.0)]
    assert len(lines) == 2 and lines[1].startswith("round     1")
    # cold models score 0 everywhere: the peer's groups teach nothing, so they arrive and take no place
    used, received = records[1]["peer_groups_used"], records[1]["peer_groups_received"]
    assert f"peer {records[1]['peer_reward']:.2f}" in lines[1] and f"peer {used}/{received} from " in lines[1]


def distinct_step(trained: bool) -> StepFigures:
    """A step whose every figure has a value of its own, none of them the default."""
    values: dict[str, object] = {}
    for k, f in enumerate(fields(StepFigures)):
        default = f.default_factory() if f.default is MISSING else f.default
        if not f.init:  # derived from the others
            continue
        if isinstance(default, bool):
            values[f.name] = not default
        elif isinstance(default, int | float):
            values[f.name] = type(default)(k + 2) + (0.5 if isinstance(default, float) else 0)
        elif isinstance(default, dict):
            values[f.name] = {PEER_A: PeerFiltered(4, 1, 2, 1)}
        else:
            values[f.name] = [PEER_B]
    return StepFigures(**values | {"trained": trained})


def test_every_declared_figure_reaches_the_record_and_tensorboard(tmp_path):
    """Every field of ``StepFigures`` is in ``metrics.jsonl`` as ``train_<name>`` with its value, and in
    TensorBoard under its tag: on a step taken, and also on one not taken when it is marked ``every_step``.
    Declaring a figure is all it takes."""
    steps = [distinct_step(trained=True), distinct_step(trained=False)]
    metrics = RunMetrics(tmp_path, MetricsConfig(display="lines"), lambda line: None)
    for round_, step in enumerate(steps):
        metrics.record(replace(report(round_), step=step))
    metrics.close()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    scalars = read_scalars(tmp_path / "tensorboard")
    for name, figure in FIGURES.items():
        for record, step in zip(records, steps, strict=True):
            assert record[record_key(name)] == json.loads(json.dumps(asdict(step)[name])), name
        if figure.tag is not None:
            expected = [(n, pytest.approx(float(getattr(step, name)))) for n, step in enumerate(steps)
                        if step.trained or figure.every_step]
            assert scalars[figure.tag] == expected, name


def test_tensorboard_can_be_switched_off(tmp_path):
    metrics = RunMetrics(tmp_path, MetricsConfig(display="lines", tensorboard=False), lambda line: None)
    metrics.record(report(0))
    metrics.close()
    assert not (tmp_path / "tensorboard").exists() and (tmp_path / "metrics.jsonl").exists()


def test_a_backends_counters_become_generator_fields_and_scalars():
    from dataclasses import dataclass, replace

    from ftis.node.runner.node import _generator_stats

    @dataclass
    class Counters:
        weight_syncs: int
        stale_generations: int
        engine_policy_version: int | None

    class Backend:
        def stats(self) -> Counters:
            return Counters(weight_syncs=3, stale_generations=0, engine_policy_version=None)

    assert _generator_stats(object()) == {}  # the transformers backend keeps none
    counters = _generator_stats(Backend())
    record = report_record(replace(report(transport=BEFORE), generator=counters))
    assert (record["generator_weight_syncs"], record["generator_stale_generations"]) == (3, 0)
    assert record["generator_engine_policy_version"] is None
    scalars = tensorboard_scalars(record)
    assert scalars["generator/weight_syncs"] == 3.0 and scalars["generator/stale_generations"] == 0.0
    assert "generator/engine_policy_version" not in scalars  # unknown: left out
