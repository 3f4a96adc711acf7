"""The demo's reading of node metrics: following a file as it is written, the live rows, the end summary
(start vs end accuracy, the solo baseline's), and the plot, from records built the way a node builds them."""

import json
from dataclasses import replace

import pytest
from helpers.metrics_fakes import AFTER, report

from ftis.node.demo.follow import MetricsFollower, NodeProgress, read_progress, with_start_of
from ftis.node.demo.plot import moving_average, plot_accuracy
from ftis.node.demo.summary import SOLO_NOT_RUN, as_json, headline, markdown, rich_table, summarize
from ftis.node.demo.view import LinesView, row, step_line
from ftis.node.records.metrics import report_record


def step(round_: int, trained: bool = True, filtered: float = 0.25, sent_total: int = 1600) -> dict:
    """A step record exactly as ``metrics.jsonl`` holds it (through JSON: NaN becomes null)."""
    record = report_record(report(round_, transport=replace(AFTER, published_bytes=sent_total), trained=trained))
    record["train_filtered_fraction"] = filtered
    return json.loads(json.dumps({k: None if v != v else v for k, v in record.items()}))  # NaN != NaN


def evaluation(round_: int, accuracy: float, version: int) -> dict:
    return {"round": round_, "time": 0.0, "policy_version": version, "eval_dataset": "arith", "eval_split": "test",
            "eval_accuracy": accuracy, "eval_correct": int(accuracy * 200), "eval_total": 200,
            "eval_format_valid": 1.0, "eval_truncated": 0.0, "eval_mean_completion_tokens": 2.5,
            "eval_tokens_per_s": 900.0, "eval_seconds": 0.5}


def progress(name: str = "small", accuracies: tuple[float, ...] = (0.30, 0.35, 0.45)) -> NodeProgress:
    node = NodeProgress(name, "tiny-small", "full")
    node.extend([evaluation(0, accuracies[0], 0), step(0, filtered=0.5), step(1, trained=False, filtered=0.9),
                 evaluation(2, accuracies[1], 1), step(2, filtered=0.25, sent_total=4800),
                 evaluation(3, accuracies[2], 2)])
    return node


def test_progress_splits_steps_from_evaluations():
    node = progress()
    assert [record["round"] for record in node.steps] == [0, 1, 2]
    assert [(e.round, e.accuracy, e.policy_version) for e in node.evaluations] == [(0, 0.30, 0), (2, 0.35, 1),
                                                                                   (3, 0.45, 2)]
    assert node.latest_step["round"] == 2 and node.latest_evaluation.round == 3


def test_summary_start_end_mean_and_swarm_figures():
    summary = summarize(progress())
    assert (summary.start_accuracy, summary.end_accuracy) == (0.30, 0.45)
    assert summary.change == pytest.approx(0.15)
    assert summary.mean_accuracy == pytest.approx((0.30 + 0.35 + 0.45) / 3)
    assert (summary.rounds, summary.evaluations) == (3, 3)
    assert summary.peer_groups_used == 3 * 3  # three steps of report()'s three peer groups
    assert summary.filtered_fraction == pytest.approx((0.5 + 0.25) / 2)  # the step that did not train is left out
    assert summary.is_weight_mean == pytest.approx(1.02)
    assert (summary.bytes_sent, summary.bytes_received) == (4800, AFTER.delivered_bytes)  # the last step's totals
    assert summary.solo_end_accuracy is None and summary.solo_mean_accuracy is None


def test_summary_with_the_solo_baseline():
    summary = summarize(progress(), solo=progress(accuracies=(0.30, 0.32, 0.34)))
    assert summary.solo_end_accuracy == 0.34
    assert summary.solo_mean_accuracy == pytest.approx(0.32)


def test_a_node_that_never_evaluated_or_stepped_sums_up_as_unknown():
    summary = summarize(NodeProgress("idle", "tiny-medium", "lora"))
    assert summary.start_accuracy is None and summary.change is None and summary.mean_accuracy is None
    assert summary.filtered_fraction is None and summary.bytes_sent == 0
    assert "| idle | tiny-medium (lora) | 0 | - | - | - | - |" in markdown([summary], solo_ran=False)


def test_markdown_shows_solo_columns_only_when_the_baseline_ran():
    rows = [summarize(progress())]
    without = markdown(rows, solo_ran=False)
    assert "solo end" not in without and SOLO_NOT_RUN in without
    assert "| small | tiny-small (full) | 3 | 0.300 | 0.450 | +0.150 | 0.367 | - | - | - | 9 | 38% | 1.02 |" in without
    with_solo = markdown([summarize(progress(), solo=progress(accuracies=(0.3, 0.3, 0.2)))], solo_ran=True)
    assert "solo end" in with_solo and SOLO_NOT_RUN not in with_solo
    assert "| 0.200 | 0.267 |" in with_solo
    assert [column.header for column in rich_table(rows, solo_ran=False).columns][:5] == [
        "node", "model", "acc\nstart", "acc\nend", "change"]  # the means and traffic are left to summary.md
    assert "of 3 rounds" in rich_table(rows, solo_ran=False).title
    assert len(rich_table(rows, solo_ran=True).columns) == len(rich_table(rows, solo_ran=False).columns) + 3
    assert as_json(rows, solo_ran=False)["nodes"][0]["change"] == pytest.approx(0.15)


def with_errors(node: NodeProgress, error: float) -> NodeProgress:
    return replace(node, evaluations=[replace(e, standard_error=error) for e in node.evaluations])


def test_the_start_the_end_and_the_solo_end_carry_their_standard_errors_and_the_lead_counts_them():
    summary = summarize(with_errors(progress(), 0.03), solo=with_errors(progress(accuracies=(0.30, 0.32, 0.34)), 0.04))
    assert summary.ahead_of_solo == pytest.approx(0.11)
    assert summary.ahead_of_solo_errors == pytest.approx(0.11 / 0.05)  # sqrt(0.03² + 0.04²)
    table = markdown([summary], solo_ran=True)
    assert "| 0.300 ± 0.030 | 0.450 ± 0.030 | +0.150 | 0.367 | 0.340 ± 0.040 | 0.320 | +0.110 (2.2 SE) |" in table
    assert "end − solo" in [column.header.replace("\n", " ") for column in rich_table([summary], True).columns]
    assert as_json([summary], solo_ran=True)["nodes"][0]["ahead_of_solo_errors"] == pytest.approx(2.2)
    assert "(SE)" in headline([summary], solo_ran=True) and "(SE)" not in headline([summary], solo_ran=False)


def test_a_solo_run_that_skipped_its_start_takes_its_twins_first_evaluation():
    swarm = progress()
    solo = NodeProgress("small-solo", "tiny-small", "full")
    solo.extend([step(0), evaluation(3, 0.40, 2)])  # at_start off: its first evaluation is its last round's
    shared = with_start_of(solo, swarm)
    assert [(e.round, e.accuracy) for e in shared.evaluations] == [(0, 0.30), (3, 0.40)]
    assert with_start_of(progress(), swarm).evaluations == progress().evaluations  # one of its own: kept
    assert summarize(swarm, shared).solo_mean_accuracy == pytest.approx(0.35)


def test_live_row_before_and_after_the_first_step():
    assert row(NodeProgress("medium", "tiny-medium", "full")) == ["medium", "tiny-medium (full)", *["-"] * 9]
    cells = row(progress())
    assert cells[:6] == ["small", "tiny-small (full)", "2", "0.25", "0.38", "0.450 (3)"]
    assert cells[6:9] == ["2/3", "25%", "1.02"]
    assert cells[9] == "4.7 KiB"


def test_step_lines_for_logs():
    lines = []
    view = LinesView(lines.append)
    node = progress()
    view.show([node], [("small", node.steps[1])])
    assert lines == [step_line("small", 5, node.steps[1])]
    assert "no step" in lines[0] and "round    1" in lines[0]


def test_follower_waits_for_complete_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    follower = MetricsFollower(path)
    assert follower.read_new() == []  # not written yet
    first, second = json.dumps(step(0)), json.dumps(evaluation(1, 0.5, 1))
    path.write_text(first + "\n" + second[:10])
    assert [record["round"] for record in follower.read_new()] == [0]
    assert follower.read_new() == []  # the half-written line stays pending
    with path.open("a") as handle:
        handle.write(second[10:] + "\n")
    assert follower.read_new() == [json.loads(second)]
    node = read_progress(path, "small", "tiny-small", "full")
    assert len(node.steps) == 1 and len(node.evaluations) == 1


def test_plot_is_a_png(tmp_path):
    path = plot_accuracy(tmp_path / "plots" / "accuracy.png", [progress(), progress("medium")],
                         {"small": progress(accuracies=(0.3, 0.2, 0.1))})
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_sampling_accuracy_is_a_trailing_moving_average():
    node = NodeProgress("small", "tiny-small", "full")
    for round_, reward in enumerate([0.0, 1.0, 0.5, None, 0.25]):
        record = step(round_)
        record["own_reward"] = reward
        node.add(record)
    assert moving_average(node, window=2) == ([0, 1, 2, 4], [0.0, 0.5, 0.75, 0.375])


def test_the_weakest_skill_at_the_start_is_followed_to_the_end_swarm_and_solo(tmp_path):
    def skilled(name, carry):
        node = NodeProgress(name, "tiny-medium", "full")
        for k, (c, n) in enumerate(carry):
            record = evaluation(k, (c + n) / 2, k) | {"eval_skills": {"carry": c, "no-carry": n},
                                                     "eval_standard_error": 0.02}
            node.add(record)
        return node

    swarm = skilled("medium", [(0.10, 0.70), (0.30, 0.75)])
    solo = skilled("medium", [(0.10, 0.70), (0.15, 0.80)])
    summary = summarize(swarm, solo)
    assert (summary.weakest_skill, summary.skill_start, summary.skill_end, summary.solo_skill_end) == (
        "carry", 0.10, 0.30, 0.15)
    assert "| carry | 0.100 | 0.300 | 0.150 |" in markdown([summary], solo_ran=True)
    line = headline([summary], solo_ran=True)
    assert "weakest skill" in line and "2.0 points" in line and "alone (solo)" in line
    assert summarize(progress()).weakest_skill is None  # a task that names no skill: the columns stay empty
    plot = plot_accuracy(tmp_path / "skills.png", [swarm], {"medium": solo})  # with the weakest-skill panel
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
