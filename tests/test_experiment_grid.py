"""The experiment's grid: the packaged default covers what the paper compares, ``--quick`` and the overrides
apply, cells are paired by seed, fingerprints separate settings but not seed counts, bad grids are refused."""

from pathlib import Path

import pytest
from helpers.experiment_grids import QUICK

from ftis.node.config import ModelConfig
from ftis.node.experiment.grid import TINY_MODEL_NAMES, GridError, ModelSpec, load_grid

GRID = load_grid()


def test_the_default_grid_has_every_condition_of_the_paper_and_three_seeds():
    assert GRID.seeds >= 3
    variants = {c.variant for c in GRID.conditions.values() if c.swarm and c.grouping == "vertical"}
    assert variants == {"nois", "vis", "tis", "ftis", "fvis"}
    assert any(c.swarm and c.variant == "ftis" and c.grouping == "horizontal" for c in GRID.conditions.values())
    assert not GRID.conditions[GRID.reference].swarm
    assert len(GRID.cells()) == GRID.seeds * len(GRID.conditions)


def test_the_default_grid_has_all_three_kinds_of_heterogeneity():
    specs = list(GRID.models.values())
    assert len({s.name for s in specs}) >= 2  # size
    assert {s.adapter for s in specs} == {"full", "lora"}  # PEFT
    mixes = {(str(s.warmup.arithmetic), s.warmup.no_carry_share) for s in specs}
    assert len(mixes) >= 2  # specialisation: a model warmed on another data mix (carries left out)


def test_quick_and_the_overrides():
    quick = GRID.adjusted(quick=True)
    assert (quick.seeds, quick.rounds) == (GRID.quick.seeds, GRID.quick.rounds)
    assert all(s.warmup.steps == GRID.quick.warmup_steps for s in quick.models.values())
    assert list(quick.conditions) == list(GRID.conditions)  # every condition is smoke-tested
    custom = GRID.adjusted(quick=True, seeds=2, rounds=5)
    assert (custom.seeds, custom.rounds) == (2, 5)


def test_cells_are_seed_major_and_model_seeds_are_paired_across_conditions():
    cells = GRID.cells()
    assert [c.seed for c in cells[: len(GRID.conditions)]] == [0] * len(GRID.conditions)
    for label in GRID.models:
        seeds = {GRID.node_config(label, condition, 2, Path("m")).model.seed for condition in GRID.conditions}
        assert len(seeds) == 1  # the same in every condition
    assert len({GRID.model_seed(label, 1) for label in GRID.models}) == len(GRID.models)  # distinct per model


def test_node_configs_carry_the_condition():
    config = GRID.node_config("small", "ftis-horizontal", 1, Path("/w/small"))
    assert config.loss.variant == "ftis" and config.loop.grouping == "horizontal" and config.loop.mode == "rounds"
    assert config.loop.swarm_seed == 1 and config.model.name == "/w/small"
    assert config.swarm.run_id == "exp-ftis-horizontal-s1"
    assert GRID.node_config("small-lora", "nois", 0, Path("m")).model.adapter == "lora"


def test_fingerprints_ignore_the_seed_count_but_not_the_settings():
    assert GRID.fingerprint("ftis") == GRID.adjusted(seeds=7).fingerprint("ftis")
    assert GRID.fingerprint("ftis") != GRID.adjusted(rounds=GRID.rounds + 1).fingerprint("ftis")
    assert GRID.fingerprint("ftis") != GRID.fingerprint("tis")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "grid.toml"
    path.write_text(text)
    return path


MINIMAL = """
seeds = 1
rounds = 2
eval_every = 1
eval_problems = 4
reference = "alone"
[models.m]
name = "tiny-small"
learning_rate = 1e-4
warmup = { steps = 2 }
[conditions]
alone = { swarm = false }
together = { variant = "tis" }
""" + QUICK


def test_a_minimal_grid_loads(tmp_path):
    grid = load_grid(write(tmp_path, MINIMAL))
    assert [c.name for c in grid.cells()] == ["alone/seed-0", "together/seed-0"]


@pytest.mark.parametrize(("change", "message"), [
    (('reference = "alone"', 'reference = "together"'), "must name a solo condition"),
    (("together = {", 'side = { swarm = false, grouping = "horizontal" }\ntogether = {'), "horizontal grouping"),
    (("[models.m]", "[node.model]\nname = 'x'\n[models.m]"), "set by the experiment"),
    (("warmup = { steps = 2 }", "warmup = { steps = 0 }"), "needs a warmup of at least 1 step"),
    (("rounds = 2", "rounds = 2\ncolour = 'red'"), "colour"),
    (("[conditions]", "[node.generation]\ngroup_size = 0\n[conditions]"), "generation.group_size"),
    (("[models.m]", "[models.'bad name']"), "must match"),
    (("warmup = { steps = 2 }", "warmup = { steps = 2, arithmetic = { max_digts = 1 } }"),
     r"models\.m\.warmup\.arithmetic\.max_digts"),
    (("[conditions]", "[node.task]\narithmetic = { max_digts = 1 }\n[conditions]"), r"task\.arithmetic\.max_digts"),
])
def test_bad_grids_are_refused_with_the_reason(tmp_path, change, message):
    with pytest.raises(GridError, match=message):
        load_grid(write(tmp_path, MINIMAL.replace(*change)))


def test_conditions_can_be_chosen_and_the_reference_stays():
    chosen = GRID.adjusted(conditions=["ftis", "nois"])
    assert list(chosen.conditions) == ["solo", "nois", "ftis"]  # the grid's order; the reference always runs
    assert chosen.comparisons == [("ftis", "nois")]  # a comparison with a dropped condition goes
    assert chosen.fingerprint("ftis") == GRID.fingerprint("ftis")  # the same cells as in the whole grid
    with pytest.raises(GridError, match="no condition sideways"):
        GRID.adjusted(conditions=["sideways"])


def test_a_comparison_must_name_conditions(tmp_path):
    with pytest.raises(GridError, match="comparisons: nowhere is not a condition"):
        load_grid(write(tmp_path, MINIMAL.replace('reference = "alone"',
                                                  'reference = "alone"\ncomparisons = [["together", "nowhere"]]')))


def test_an_unreadable_grid_file_is_a_grid_error(tmp_path):
    with pytest.raises(GridError, match="cannot read"):
        load_grid(tmp_path / "missing.toml")
    with pytest.raises(GridError, match="not valid TOML"):
        load_grid(write(tmp_path, "seeds = ["))


def test_a_model_spec_takes_the_node_s_lora_settings():
    for field in ("adapter", "lora_rank", "lora_alpha"):
        assert ModelSpec.model_fields[field].default == ModelConfig.model_fields[field].default
    assert ModelSpec.model_fields["lora_rank"].metadata == ModelConfig.model_fields["lora_rank"].metadata


def test_a_full_model_s_unused_lora_settings_leave_its_cells_alone(tmp_path):
    changed = MINIMAL.replace("warmup = { steps = 2 }", "warmup = { steps = 2 }\nlora_rank = 4")
    assert load_grid(write(tmp_path, changed)).fingerprint("alone") == load_grid(
        write(tmp_path, MINIMAL)).fingerprint("alone")
    lora = MINIMAL.replace("warmup = { steps = 2 }", "warmup = { steps = 2 }\nadapter = 'lora'")
    assert load_grid(write(tmp_path, lora)).fingerprint("alone") != load_grid(
        write(tmp_path, lora.replace("adapter = 'lora'", "adapter = 'lora'\nlora_rank = 4"))).fingerprint("alone")


# --- conditions of some of the models; the grid of tokenizers --------------------------------------------

SUBSET = MINIMAL.replace("[conditions]", """[models.n]
name = "tiny-small-bpe"
learning_rate = 1e-4
warmup = { steps = 2 }
[models.o]
name = "tiny-small"
learning_rate = 1e-4
warmup_seed = 3
warmup = { steps = 2 }
[conditions]""").replace('together = { variant = "tis" }', 'together = { variant = "tis", models = ["o", "m"] }')


def test_a_condition_trains_the_models_it_names_in_the_grid_s_order(tmp_path):
    grid = load_grid(write(tmp_path, SUBSET))
    assert grid.condition_models("alone") == ["m", "n", "o"]
    assert grid.condition_models("together") == ["m", "o"]
    assert [c.name for c in grid.cells()] == ["alone/seed-0", "together/seed-0"]
    # a model keeps its seed (its place in [models]) in every condition it trains in
    assert grid.node_config("o", "together", 1, Path("x")).model.seed == grid.node_config("o", "alone", 1,
                                                                                           Path("x")).model.seed
    with pytest.raises(GridError, match="'n' does not train in condition 'together'"):
        grid.node_config("n", "together", 0, Path("x"))
    assert (grid.warmup_seed_of("m"), grid.warmup_seed_of("o")) == (grid.warmup_seed, 3)


@pytest.mark.parametrize(("models", "message"), [
    ('["m", "nowhere"]', r"conditions\.together\.models: no model 'nowhere' in \[models\] \(it has m, n, o\)"),
    ('["m", "m"]', "lists a model twice"),
    ("[]", "at least 1"),
])
def test_a_condition_naming_unknown_or_repeated_models_is_refused(tmp_path, models, message):
    with pytest.raises(GridError, match=message):
        load_grid(write(tmp_path, SUBSET.replace('models = ["o", "m"]', f"models = {models}")))


def test_a_subset_s_fingerprint_covers_its_models_only(tmp_path):
    grid = load_grid(write(tmp_path, SUBSET))
    listed = load_grid(write(tmp_path, SUBSET.replace('models = ["o", "m"]', 'models = ["m", "n", "o"]')))
    unlisted = load_grid(write(tmp_path, SUBSET.replace(', models = ["o", "m"]', "")))
    assert listed.fingerprint("together") == unlisted.fingerprint("together")  # all of them, written out or not
    assert grid.fingerprint("together") != unlisted.fingerprint("together")
    other_n = load_grid(write(tmp_path, SUBSET.replace('name = "tiny-small-bpe"\nlearning_rate = 1e-4',
                                                       'name = "tiny-small-bpe"\nlearning_rate = 3e-4')))
    assert other_n.fingerprint("together") == grid.fingerprint("together")  # n does not train there
    assert other_n.fingerprint("alone") != grid.fingerprint("alone")


def test_every_built_in_tiny_model_can_be_a_grid_model():
    from ftis.node.models import TINY_MODELS

    assert set(TINY_MODEL_NAMES) == set(TINY_MODELS)


def test_a_tiny_model_needs_a_warm_up_and_a_pretrained_one_refuses_one(tmp_path):
    with pytest.raises(GridError, match="needs a warmup"):
        load_grid(write(tmp_path, MINIMAL.replace("warmup = { steps = 2 }\n", "")))
    with pytest.raises(GridError, match="pretrained model"):
        load_grid(write(tmp_path, MINIMAL.replace('name = "tiny-small"', 'name = "smollm2-135m-instruct"')))


REAL_GRID = Path(__file__).parent.parent / "examples" / "experiment-real.toml"


def test_the_real_model_grid_runs_the_demo_s_nodes_as_they_are():
    grid = load_grid(REAL_GRID)
    assert {label: (spec.name, spec.adapter, spec.warmup) for label, spec in grid.models.items()} == {
        "smollm2": ("smollm2-135m-instruct", "full", None), "gemma": ("gemma-3-270m", "lora", None)}
    assert set(grid.conditions) == {"solo", "solo-matched", "ftis", "nois"} and grid.seeds >= 3
    assert grid.adjusted(quick=True).models == grid.models  # --quick has no warm-up to shorten
    from ftis.node.config import NodeConfig
    from ftis.node.demo.settings import load_demo_config

    demo = load_demo_config(str(Path(__file__).parent.parent / "examples" / "demo-real.toml")).node_settings()
    for label in grid.models:  # the demo's nodes: the same model, adapter, rate, task, prompts, sampling
        config = grid.node_config(label, "ftis", 0, Path(grid.models[label].name))
        expected = NodeConfig.model_validate(demo[label])
        for key in ("name", "adapter", "lora_rank", "lora_alpha", "chat_template", "bos"):
            assert getattr(config.model, key) == getattr(expected.model, key), key
        assert config.trainer.learning_rate == expected.trainer.learning_rate
        # the sampler's copy ([generation] weights) is how fast the demo samples; the grid measures in float32
        sampled = config.generation.model_copy(update={"weights": expected.generation.weights})
        assert (config.task, sampled, config.mix) == (expected.task, expected.generation, expected.mix)
        assert config.loss.variant == "ftis"
    assert grid.node_config("smollm2", "solo-matched", 0, Path("x")).generation.prompts_per_round == 16


def test_node_model_settings_the_experiment_does_not_set_reach_every_node(tmp_path):
    grid = load_grid(write(tmp_path, MINIMAL.replace("[models.m]", "[node.model]\nchat_template = 'off'\n[models.m]")))
    assert grid.node_config("m", "alone", 0, Path("x")).model.chat_template == "off"


def test_the_tokenizers_grid_pairs_small_with_a_bpe_peer_and_with_a_character_peer():
    grid = load_grid(Path(__file__).parent.parent / "node" / "experiment" / "tokenizers.toml")
    assert grid.models["small-bpe"].name == "tiny-small-bpe"
    assert grid.models["small-twin"].name == grid.models["small"].name == "tiny-small"
    assert grid.warmup_seed_of("small-twin") != grid.warmup_seed_of("small")  # another model, not a copy
    for label in ("small-bpe", "small-twin"):  # the same recipe as small, but for what makes it another model
        assert grid.models[label].warmup == grid.models["small"].warmup
        assert grid.models[label].learning_rate == grid.models["small"].learning_rate
    assert grid.condition_models("solo") == ["small", "small-bpe", "small-twin"]
    assert grid.condition_models("xtok-pair") == ["small", "small-bpe"]
    assert grid.condition_models("same-pair") == ["small", "small-twin"]
    assert {grid.conditions[name].variant for name in ("xtok-pair", "same-pair")} == {"ftis"}
    assert ("xtok-pair", "same-pair") in grid.comparisons
    assert grid.node == GRID.node  # the default grid's task, generation and mix
    assert (grid.seeds, grid.rounds, grid.eval_problems) == (GRID.seeds, GRID.rounds, GRID.eval_problems)
