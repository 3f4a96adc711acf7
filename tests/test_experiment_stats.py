"""The experiment report's numbers on hand-made cell records: mean ± std over seeds, final and AUC, paired
differences against the reference (over the seeds both have), step figures over stepped rounds only,
and the markdown that shows them."""

import math

import pytest

from ftis.node.experiment.grid import load_grid
from ftis.node.experiment.report import render
from ftis.node.experiment.stats import (
    Spread,
    auc,
    cell_step_mean,
    condition_rows,
    early_reward,
    late_reward,
    mean_curve,
    model_rows,
    pair_rows,
    step_mean,
)


def node(id_curve, ood_curve, filtered=(0.0, 0.0), trained=(1, 1), weight=(1.0, 1.0)):
    n = len(filtered)
    return {"model": "tiny-small", "adapter": "full", "eval_rounds": [0, n][: len(id_curve)],
            "id_accuracy": list(id_curve), "ood_accuracy": list(ood_curve),
            "steps": {"own_reward": [0.5] * n, "filtered_fraction": list(filtered),
                      "peer_filtered_fraction": list(filtered), "is_weight_mean": list(weight),
                      "filtered_advantage_fraction": list(filtered), "filtered_divergence_fraction": [0.0] * n,
                      "truncated_fraction": [0.0] * n, "peer_groups_used": [2.0] * n,
                      "trained": [float(t) for t in trained]}}


def record(condition, seed, nodes, swarm=True, seconds=10.0):
    return {"condition": condition, "seed": seed, "settings": {"swarm": swarm}, "wall_seconds": seconds,
            "nodes": nodes}


# model "a": solo at seeds 0, 1, 2; ftis at seeds 0 and 1 only (seed 2 unfinished)
RECORDS = [
    record("solo", 0, {"a": node([0.2, 0.3], [0.0, 0.1])}, swarm=False),
    record("solo", 1, {"a": node([0.1, 0.4], [0.0, 0.0])}, swarm=False),
    record("solo", 2, {"a": node([0.3, 0.2], [0.1, 0.1])}, swarm=False),
    record("ftis", 0, {"a": node([0.2, 0.5], [0.0, 0.3], filtered=(0.5, 0.3), weight=(0.9, 0.7))}),
    record("ftis", 1, {"a": node([0.1, 0.4], [0.0, 0.2], filtered=(0.5, 0.0), trained=(1, 0), weight=(0.8, 0.0))}),
]


def test_spread_is_the_mean_and_the_sample_standard_deviation():
    s = Spread.of([0.3, 0.4, 0.2])
    assert s.mean == pytest.approx(0.3) and s.std == pytest.approx(0.1) and s.n == 3
    one = Spread.of([0.7])
    assert one.mean == 0.7 and math.isnan(one.std)
    assert Spread.of([]).n == 0 and math.isnan(Spread.of([]).mean)


def test_auc_is_the_mean_over_every_evaluation():
    assert auc([0.2, 0.4, 0.9]) == pytest.approx(0.5)


def test_model_rows_final_auc_and_paired_differences_by_hand():
    rows = {(r.condition, r.model): r for r in model_rows(RECORDS, ["solo", "ftis", "tis"], ["a"], "solo")}
    assert set(rows) == {("solo", "a"), ("ftis", "a")}  # no tis cells: no row
    solo, ftis = rows["solo", "a"], rows["ftis", "a"]
    # solo finals 0.3, 0.4, 0.2; AUCs 0.25 each
    final, mean = solo.values["id_final"], solo.values["id_auc"]
    assert (final.mean, final.std, final.n) == pytest.approx((0.3, 0.1, 3))
    assert (mean.mean, mean.std) == pytest.approx((0.25, 0.0))
    assert solo.deltas == {}
    # ftis finals 0.5, 0.4 against solo's 0.3, 0.4 at the same seeds: differences 0.2 and 0.0
    assert (ftis.values["id_final"].mean, ftis.values["id_final"].n) == pytest.approx((0.45, 2))
    delta = ftis.deltas["id_final"]
    assert (delta.mean, delta.std, delta.n) == pytest.approx((0.1, math.sqrt(0.02), 2))  # seed 2: not paired
    # AUCs 0.35, 0.25 against 0.25, 0.25
    assert (ftis.deltas["id_auc"].mean, ftis.deltas["id_auc"].std) == pytest.approx((0.05, math.sqrt(0.005)))
    # OOD finals 0.3, 0.2 against 0.1, 0.0: +0.2 both times
    assert (ftis.deltas["ood_final"].mean, ftis.deltas["ood_final"].std) == pytest.approx((0.2, 0.0))


def test_a_condition_of_some_models_has_rows_for_those_only():
    solo = [record("solo", 0, {"a": node([0.2, 0.3], [0.0, 0.1]), "b": node([0.1, 0.2], [0.0, 0.0])}, swarm=False)]
    pair = [record("pair", 0, {"a": node([0.2, 0.5], [0.0, 0.3])})]  # b does not train in "pair"
    rows = [(r.condition, r.model) for r in model_rows(solo + pair, ["solo", "pair"], ["a", "b"], "solo")]
    assert rows == [("solo", "a"), ("solo", "b"), ("pair", "a")]
    assert [(r.first, r.model) for r in pair_rows(solo + pair, [("pair", "solo")], ["a", "b"])] == [("pair", "a")]
    assert mean_curve(solo + pair, "pair", "b", "id") == ([], [])


def test_sampling_accuracy_over_the_first_and_last_quarter_of_the_rounds():
    rewards = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]  # 9 rounds: a quarter is 3 rounds
    one = {"steps": {"own_reward": rewards}}
    assert early_reward(one) == pytest.approx(0.1) and late_reward(one) == pytest.approx(0.7)
    assert early_reward({"steps": {"own_reward": [0.4]}}) == pytest.approx(0.4)  # one round: itself


def test_step_figures_leave_out_rounds_without_a_step():
    stepped_once = RECORDS[4]["nodes"]["a"]
    assert step_mean(stepped_once, "filtered_fraction") == pytest.approx(0.5)  # the 0.0 of the idle round is out
    assert step_mean(stepped_once, "is_weight_mean") == pytest.approx(0.8)
    never = node([0.1], [0.1], filtered=(0.0,), trained=(0,))
    assert math.isnan(step_mean(never, "filtered_fraction"))
    both = record("x", 0, {"a": node([0.1], [0.1], filtered=(0.2, 0.4)), "b": never})
    assert cell_step_mean(both, "filtered_fraction") == pytest.approx(0.3)  # b never stepped: left out


def test_condition_rows_average_cells_over_seeds():
    rows = {row.condition: row for row in condition_rows(RECORDS, ["solo", "ftis"])}
    # ftis cells: seed 0 filtered (0.5 + 0.3) / 2 = 0.4; seed 1 0.5 (one stepped round)
    assert (rows["ftis"].filtered.mean, rows["ftis"].filtered.n) == pytest.approx((0.45, 2))
    assert rows["ftis"].is_weight.mean == pytest.approx((0.8 + 0.8) / 2)
    assert rows["ftis"].swarm and not rows["solo"].swarm
    assert rows["solo"].wall_seconds.mean == pytest.approx(10.0)


def test_the_markdown_shows_the_numbers_and_says_when_it_is_partial():
    grid = load_grid().adjusted(seeds=3)
    records = [record(r["condition"], r["seed"], {label: r["nodes"]["a"] for label in grid.models},
                      swarm=r["settings"]["swarm"]) for r in RECORDS]
    text = render(grid, records, "ftis-node experiment --out x")
    assert "`ftis-node experiment --out x`" in text
    assert f"5 of {len(grid.cells())} cells finished (**partial**" in text
    assert "| solo | small | 30.0 ± 10.0 | — | 25.0 ± 0.0 | — | 3 |" in text
    assert "| ftis | small | 45.0 ± 7.1 | +10.0 ± 14.1 | 30.0 ± 7.1 | +5.0 ± 7.1 | 2 |" in text
    assert "| ftis | 45.0 ± 7.1 | 45.0 ± 7.1 | 45.0 ± 7.1 | 0.0 ± 0.0 | 0.800 ± 0.000 |" in text  # filtering table
    assert "| solo | — | — | — | — |" in text  # no peers, no peer figures
    assert "| ftis | small | 50.0 ± 0.0 | 50.0 ± 0.0 | +0.0 ± 0.0 | 2 |" in text  # sampling: 0.5 each round
    # paired by seed: final +20 and +0 points -> +10 ± 10 (standard error), one seed of two ahead
    assert "| ftis − solo | small | +10.0 ± 10.0 (1/2) | +5.0 ± 5.0 (1/2) | n/a | " in text
    assert "vis |" not in text.split("## In-distribution")[1].split("## Out")[0]  # no vis cells: no vis rows


def test_a_report_without_cells_says_so():
    assert "No cell has finished yet." in render(load_grid(), [], "ftis-node experiment")
