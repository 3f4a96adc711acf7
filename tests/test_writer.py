"""The background writer of a node's files (``records/writer.py``) and ``RunMetrics`` on top of it: every
record handed over is on disk once the run closes, in order, and a failed write reaches the run loop."""

import json
import threading

import pytest
from helpers.metrics_fakes import report

from ftis.node.config import MetricsConfig
from ftis.node.records.metrics import RunMetrics
from ftis.node.records.writer import BackgroundWriter


def test_jobs_run_in_order_off_the_callers_thread_and_close_runs_them_all():
    release = threading.Event()
    done: list[tuple[int, str]] = []
    writer = BackgroundWriter(max_pending=64)
    writer.submit(release.wait)  # holds the writer until every job below is queued
    for k in range(50):
        writer.submit(lambda k=k: done.append((k, threading.current_thread().name)))
    assert done == []  # none ran yet: the caller did not wait for them
    release.set()
    writer.close()
    assert [k for k, _ in done] == list(range(50))
    assert {name for _, name in done} == {"ftis-writer"}
    writer.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        writer.submit(print)


def test_flush_waits_for_the_jobs_submitted_so_far():
    done: list[int] = []
    writer = BackgroundWriter()
    try:
        for k in range(5):
            writer.submit(done.append, k)
        writer.flush()
        assert done == [0, 1, 2, 3, 4]
    finally:
        writer.close()


def test_a_failed_job_is_raised_in_the_callers_thread_and_the_jobs_after_it_are_dropped():
    done: list[int] = []
    writer = BackgroundWriter()

    def fail() -> None:
        raise OSError(28, "No space left on device")

    writer.submit(fail)
    writer.submit(done.append, 1)  # may be queued before the failure is known: dropped all the same
    with pytest.raises(OSError, match="No space left"):
        writer.flush()
    with pytest.raises(OSError, match="No space left"):  # and every later submit says so too
        writer.submit(done.append, 2)
    writer.close()  # already raised once: close does not raise it again
    assert done == []


def test_close_raises_a_failure_no_submit_reported():
    writer = BackgroundWriter()
    writer.submit(int, "not a number")
    with pytest.raises(ValueError, match="not a number"):
        writer.close()


def test_run_metrics_writes_every_record_by_close(tmp_path):
    metrics = RunMetrics(tmp_path, MetricsConfig(display="lines", tensorboard=False), lambda line: None)
    try:
        for round_ in range(40):
            metrics.record(report(round_))
            metrics.log.write({"round": round_, "eval_accuracy": 0.5})  # an evaluation's record, in between
    finally:
        metrics.close()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    expected = [(k, is_step) for k in range(40) for is_step in (True, False)]
    assert [(r["round"], "own_reward" in r) for r in records] == expected
    assert json.loads((tmp_path / "peers.json").read_text())["round"] == 39


def test_run_metrics_raises_a_failed_write_in_the_loops_thread(tmp_path):
    metrics = RunMetrics(tmp_path, MetricsConfig(display="lines", tensorboard=False), lambda line: None)
    (tmp_path / "peers.json").mkdir()  # peers.json cannot be replaced by a file now
    metrics.record(report(0))
    with pytest.raises(OSError):
        metrics.flush()
    with pytest.raises(OSError):  # and every later record says so too
        metrics.record(report(1))
    metrics.close()
    assert [json.loads(line)["round"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [0]
