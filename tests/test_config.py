"""The config tree: every example parses, defaults agree with the loss, bad input is refused when the file
loads (the arithmetic task's settings and the warm-up's mix over them too), and problems read ``loc: reason``."""

import math
from pathlib import Path
from typing import get_args

import pytest
from pydantic import ValidationError

from ftis.node.config import (
    ArithmeticConfig,
    ConfigError,
    LossConfig,
    LossVariant,
    NodeConfig,
    describe_validation_error,
    load_config,
)
from ftis.node.loss import LOSS_VARIANTS, LossParams
from ftis.node.trainer.loss_params import loss_params

# examples/demo-*.toml are settings of `ftis-node demo`, parsed in test_demo_settings.py; examples/experiment-*.toml
# grids of `ftis-node experiment`, parsed in test_experiment_grid.py.
EXAMPLES = sorted(path for path in (Path(__file__).resolve().parent.parent / "examples").glob("*.toml")
                  if not path.name.startswith(("demo-", "experiment-")))


def test_there_are_examples():
    assert EXAMPLES


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_parses(path):
    config = load_config(path)
    assert isinstance(config, NodeConfig)
    assert loss_params(config.loss).divergence_threshold >= 0


def test_config_names_exactly_the_variants_of_the_table():
    assert set(get_args(LossVariant)) == set(LOSS_VARIANTS)


def test_defaults_agree_with_the_loss_defaults():
    assert loss_params(LossConfig()) == LossParams()
    assert LossConfig().variant == "ftis"
    assert LossConfig().filter_local is False


def test_unknown_setting_is_refused(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[loss]\nvariant = "ftis"\nclip = 3.0\n')
    with pytest.raises(ConfigError, match=r"loss\.clip"):
        load_config(path)


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('variant = "grpo"', "loss.variant"),
        ("clip_c = 0.0", "loss.clip_c"),
        ("clip_c = nan", "loss.clip_c"),
        ("epsilon = 1.5", "loss.epsilon"),
        ("divergence_threshold = -1.0", "loss.divergence_threshold"),
        ('filter_rule = "xor"', "loss.filter_rule"),
        ('advantage_norm = "rank"', "loss.advantage_norm"),
    ],
)
def test_bad_values_name_their_field(tmp_path, line, field):
    path = tmp_path / "bad.toml"
    path.write_text(f"[loss]\n{line}\n")
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(path)


def test_infinite_truncation_is_allowed(tmp_path):
    path = tmp_path / "inf.toml"
    path.write_text("[loss]\nvariant = \"tis\"\nclip_c = inf\n")
    assert math.isinf(loss_params(load_config(path).loss).clip_c)


def test_unreadable_and_invalid_toml_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[loss\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(broken)


def test_divergence_threshold_schedule_is_linear_then_constant():
    config = LossConfig(divergence_threshold=5.0, divergence_threshold_end=50.0, divergence_schedule_steps=100)
    assert config.divergence_threshold_at(0) == 5.0
    assert config.divergence_threshold_at(50) == pytest.approx(27.5)
    assert config.divergence_threshold_at(100) == 50.0
    assert config.divergence_threshold_at(1000) == 50.0
    assert loss_params(config, step=50).divergence_threshold == pytest.approx(27.5)
    assert LossConfig(divergence_threshold=7.0).divergence_threshold_at(10_000) == 7.0


def _missing_or_different(example: dict, defaults: dict, where: str = "") -> list[str]:
    """Settings whose default is not written in ``example`` (unset optionals and empty tables may be left out)."""
    problems = []
    for key, value in defaults.items():
        name = f"{where}{key}"
        if isinstance(value, dict) and value:
            problems += _missing_or_different(example.get(key, {}), value, name + ".")
        elif key not in example:
            if value not in (None, {}, []):
                problems.append(f"{name} is not listed")
        elif example[key] != value:
            problems.append(f"{name} = {example[key]!r}, but the default is {value!r}")
    return problems


def test_the_full_example_lists_every_setting_at_its_default():
    import tomllib

    example = tomllib.loads((Path(__file__).resolve().parent.parent / "examples" / "node.toml").read_text())
    assert _missing_or_different(example, NodeConfig().model_dump(mode="json")) == []


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("[task]\narithmetic = { max_digts = 3 }", "task.arithmetic.max_digts: Extra inputs"),
        ("[task.arithmetic]\noperations = '+/'", "task.arithmetic.operations"),
        ("[task.arithmetic]\noperand_draw = 'uniform'", "task.arithmetic.operand_draw"),
        ("[task.arithmetic]\noperands = 1", "task.arithmetic.operands"),
        ("[model.warmup]\narithmetic = { max_digts = 3 }", "model.warmup.arithmetic.max_digts: Extra inputs"),
        ("[model.warmup]\narithmetic = { operands = 'two' }", "model.warmup.arithmetic.operands"),
        ("[model.warmup]\narithmetic = { operations = '++' }", "model.warmup.arithmetic.operations"),
    ],
)
def test_a_bad_arithmetic_setting_fails_at_load_naming_its_key(tmp_path, text, field):
    path = tmp_path / "bad.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(path)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[task.arithmetic]\nmin_digits = 3\nmax_digits = 2", r"task\.arithmetic: .*min_digits <= max_digits"),
        ("[task.arithmetic]\nmax_digits = 30", r"task\.arithmetic: .*max_digits \+ ood_extra_digits <= 30"),
        ("[task.arithmetic]\nood_operations = '+'", "ood_operations must be held out"),
        ("[task.arithmetic]\nood_extra_digits = 0", "the ood split must differ"),
        # each key of the warm-up's mix is fine alone; laid over the task's settings they contradict
        ("[task.arithmetic]\nmax_digits = 1\n[model.warmup]\narithmetic = { min_digits = 2 }",
         r"model\.warmup\.arithmetic over task\.arithmetic: .*min_digits <= max_digits"),
        ("[model.warmup]\narithmetic = { ood_operations = '-' }", r"model\.warmup\.arithmetic over .*held out"),
    ],
)
def test_contradicting_arithmetic_settings_fail_at_load(tmp_path, text, says):
    path = tmp_path / "bad.toml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=says):
        load_config(path)


def test_the_warmup_mix_keeps_only_what_it_sets_and_lays_it_over_the_task():
    config = NodeConfig.model_validate({"task": {"arithmetic": {"max_digits": 3}},
                                        "model": {"warmup": {"arithmetic": {"operations": "+"}}}})
    assert config.model.warmup.arithmetic == {"operations": "+"}  # a partial table, as written
    assert config.task.arithmetic == ArithmeticConfig(max_digits=3)
    mix = config.task.arithmetic.overridden(config.model.warmup.arithmetic)
    assert (mix.operations, mix.max_digits) == ("+", 3)


def test_a_validation_error_reads_as_located_problems():
    with pytest.raises(ValidationError) as caught:
        NodeConfig.model_validate({"loss": {"clip": 1}, "generation": {"group_size": 0}})
    assert describe_validation_error(caught.value) == (
        "loss.clip: Extra inputs are not permitted; generation.group_size: Input should be greater than or equal to 1")
    with pytest.raises(ValidationError) as caught:
        ArithmeticConfig(min_digits=2, max_digits=1)
    assert describe_validation_error(caught.value).startswith("(root): Value error, need min_digits")
    assert describe_validation_error(caught.value, "task.arithmetic").startswith("task.arithmetic: Value error")
