"""``ftis-node experiment`` end to end: ``--quick`` writes every cell, the report and the figures; a rerun
skips finished cells; an interrupted grid resumes where it stopped; more seeds add cells; a folder of
other settings is refused. Warm starts go into a temporary cache, never the home folder."""

import json
from pathlib import Path

import pytest
from helpers.experiment_grids import QUICK
from typer.testing import CliRunner

import ftis.node.experiment.cell as cell_module
from ftis.node.cli import app
from ftis.node.experiment.grid import load_grid
from ftis.node.experiment.runner import run_experiment
from ftis.node.experiment.store import StoreError, cell_path

TINY_GRID = """
seeds = 1
rounds = 2
eval_every = 1
eval_problems = 4
reference = "alone"
[node.task]
arithmetic = { operations = "+", max_digits = 1 }
[node.generation]
prompts_per_round = 2
group_size = 4
max_new_tokens = 3
[models.a]
name = "tiny-small"
learning_rate = 1e-4
warmup = { steps = 2, batch_size = 4, eval_problems = 4 }
[models.b]
name = "tiny-small"
adapter = "lora"
lora_rank = 16  # the node's default (128) is more than a tiny model takes
lora_alpha = 32.0
learning_rate = 1e-3
warmup = { steps = 2, batch_size = 4, eval_problems = 4, arithmetic = { operations = "+-" } }
[conditions]
alone = { swarm = false }
together = { variant = "ftis" }
""" + QUICK


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("FTIS_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def tiny_grid(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(TINY_GRID)
    return load_grid(path)


@pytest.fixture
def counted(monkeypatch):
    """run_cell, counting its calls and failing on the calls listed in ``counted.fail_on``."""
    calls: list[str] = []
    real = cell_module.run_cell

    def run_cell(grid, cell, warm):
        calls.append(cell.name)
        if len(calls) in run_cell.fail_on:
            raise KeyboardInterrupt  # as Ctrl-C in the middle of a cell
        return real(grid, cell, warm)

    run_cell.fail_on = set()
    run_cell.calls = calls
    monkeypatch.setattr(cell_module, "run_cell", run_cell)
    return run_cell


def test_quick_runs_every_condition_and_writes_the_report_and_figures(tmp_path):
    out = tmp_path / "quick"
    result = CliRunner().invoke(app, ["experiment", "--quick", "--out", str(out)])
    assert result.exit_code == 0, result.output
    grid = load_grid().adjusted(quick=True)
    for cell in grid.cells():
        record = json.loads(cell_path(out, cell).read_text())
        assert record["condition"] == cell.condition and set(record["nodes"]) == set(grid.models)
        for node in record["nodes"].values():
            assert node["eval_rounds"] == [0, grid.rounds] and len(node["id_accuracy"]) == 2
            assert len(node["steps"]["filtered_fraction"]) == grid.rounds
    report = (out / "report.md").read_text()
    assert f"{len(grid.cells())} of {len(grid.cells())} cells finished." in report
    for name in ("accuracy_id.png", "accuracy_ood.png", "filtering.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "ETA" in result.output and "report:" in result.output
    assert not list(out.rglob(".*.tmp-*"))  # no staging debris


def test_an_interrupted_grid_resumes_and_more_seeds_add_cells(tmp_path, tiny_grid, counted):
    out = tmp_path / "grid"
    counted.fail_on = {2}
    with pytest.raises(KeyboardInterrupt):
        run_experiment(tiny_grid, out, lambda line: None, "test")
    first = cell_path(out, tiny_grid.cells()[0])
    assert first.exists() and not cell_path(out, tiny_grid.cells()[1]).exists()
    stamp = first.stat().st_mtime_ns

    counted.fail_on = set()
    result = run_experiment(tiny_grid, out, lambda line: None, "test")
    assert counted.calls == ["alone/seed-0", "together/seed-0", "together/seed-0"]  # only the unfinished cell again
    assert (result.ran, result.skipped) == (1, 1)
    assert first.stat().st_mtime_ns == stamp

    lines: list[str] = []
    result = run_experiment(tiny_grid.adjusted(seeds=2), out, lines.append, "test")
    assert counted.calls[3:] == ["alone/seed-1", "together/seed-1"]  # the new seed only
    assert (result.ran, result.skipped) == (2, 2)
    assert "2 finished already, 2 to run" in lines[0]
    assert "4 of 4 cells finished." in result.report.read_text()

    run_experiment(tiny_grid.adjusted(seeds=2), out, lambda line: None, "test")
    assert len(counted.calls) == 5  # all finished: nothing runs, the report is rewritten


def test_a_folder_of_other_settings_is_refused(tmp_path, tiny_grid):
    out = tmp_path / "grid"
    run_experiment(tiny_grid, out, lambda line: None, "test")
    with pytest.raises(StoreError, match="other settings"):
        run_experiment(tiny_grid.adjusted(rounds=3), out, lambda line: None, "test")
    config = tmp_path / "grid.toml"
    result = CliRunner().invoke(app, ["experiment", "--config", str(config), "--rounds", "3", "--out", str(out)])
    assert result.exit_code == 1 and "other settings" in result.output


def test_the_cli_refuses_a_bad_grid_with_exit_2(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text(TINY_GRID.replace('reference = "alone"', 'reference = "nowhere"'))
    result = CliRunner().invoke(app, ["experiment", "--config", str(config), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "reference" in result.output


def test_a_condition_of_some_models_runs_those_and_the_report_shows_each(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(TINY_GRID.replace("[conditions]", """[models.c]
name = "tiny-small-bpe"
learning_rate = 1e-4
warmup = { steps = 2, batch_size = 4, eval_problems = 4 }
[conditions]""").replace('together = { variant = "ftis" }',
                          'together = { variant = "ftis" }\nacross = { variant = "ftis", models = ["a", "c"] }'))
    grid = load_grid(path)
    out = tmp_path / "subset"
    run_experiment(grid, out, lambda line: None, "test")
    nodes = {cell.condition: set(json.loads(cell_path(out, cell).read_text())["nodes"]) for cell in grid.cells()}
    assert nodes == {"alone": {"a", "b", "c"}, "together": {"a", "b", "c"}, "across": {"a", "c"}}
    report = (out / "report.md").read_text()
    assert "| across | a, c | together |" in report
    assert "| across | a |" in report and "| across | c |" in report and "| across | b |" not in report
    assert "| across − alone | c |" in report and "| across − alone | b |" not in report


def test_the_grid_of_tokenizers_runs_quick(tmp_path):
    config = Path(__file__).resolve().parent.parent / "node" / "experiment" / "tokenizers.toml"
    out = tmp_path / "tokenizers"
    result = CliRunner().invoke(app, ["experiment", "--quick", "--config", str(config), "--out", str(out)])
    assert result.exit_code == 0, result.output
    grid = load_grid(config).adjusted(quick=True)
    nodes = {cell.condition: sorted(json.loads(cell_path(out, cell).read_text())["nodes"]) for cell in grid.cells()}
    assert nodes == {"solo": ["small", "small-bpe", "small-twin"], "xtok-pair": ["small", "small-bpe"],
                     "same-pair": ["small", "small-twin"], "same-pair-seq": ["small", "small-twin"],
                     "xtok-pair-nois": ["small", "small-bpe"]}
    assert "| xtok-pair − same-pair | small |" in (out / "report.md").read_text()
