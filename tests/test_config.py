"""The config tree: every example parses, defaults agree with the loss, bad input is refused."""

import math
from pathlib import Path
from typing import get_args

import pytest

from ftis.node.config import ConfigError, LossConfig, LossVariant, NodeConfig, load_config
from ftis.node.loss import LOSS_VARIANTS, LossParams

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.toml"))


def test_there_are_examples():
    assert EXAMPLES


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_parses(path):
    config = load_config(path)
    assert isinstance(config, NodeConfig)
    assert config.loss.params().divergence_threshold >= 0


def test_config_names_exactly_the_variants_of_the_table():
    assert set(get_args(LossVariant)) == set(LOSS_VARIANTS)


def test_defaults_agree_with_the_loss_defaults():
    assert LossConfig().params() == LossParams()
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
    assert math.isinf(load_config(path).loss.params().clip_c)


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
    assert config.params(step=50).divergence_threshold == pytest.approx(27.5)
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
