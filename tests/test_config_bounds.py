"""Every numeric setting has the bounds its meaning gives it, checked when the config is loaded, the key named.

Run: python -m pytest tests/test_config_bounds.py -q

The test walks every numeric field of the config tree (a node's file, the demo's ``[demo]``, the experiment grid's
sections) and gives each −1, 0, +inf, NaN and 2⁶³ (2⁶³ − 1 in a TOML file, whose integers are 64-bit): each is
either refused with a ``ConfigError`` naming the key, or taken with a meaning the setting's description states (0
as "off", "never", "all"...; +inf only where the description says what infinity means). None may reach a run and
fail inside numpy, torch or asyncio with a traceback.
"""

import math
import typing
from collections.abc import Iterator
from pathlib import Path

import annotated_types
import pytest
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from ftis.node.config import ConfigError, NodeConfig, describe_validation_error, load_config
from ftis.node.config.base import MAX_SEED, Section
from ftis.node.demo.settings import DemoSection
from ftis.node.experiment.grid import Condition, Grid, ModelSpec, QuickSettings

# The settings whose description says what +inf means (the loss's C and g: no truncation, no filter; its largest
# surprise: no completion is too surprising).
INFINITY_MEANS_OFF = {"loss.clip_c", "loss.divergence_threshold", "loss.divergence_threshold_end", "loss.max_surprise"}
HOSTILE = (-1, 0, math.inf, math.nan, 2**63)


def numeric_fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, FieldInfo, type]]:
    """(dotted path, field, int or float) of every numeric field of ``model`` and its sections."""
    for name, field in model.model_fields.items():
        kinds = typing.get_args(field.annotation) or (field.annotation,)
        sections = [kind for kind in kinds if isinstance(kind, type) and issubclass(kind, BaseModel)]
        if sections:
            yield from numeric_fields(sections[0], f"{prefix}{name}.")
        for kind in (int, float):
            if kind in kinds:
                yield f"{prefix}{name}", field, kind


NODE_FIELDS = list(numeric_fields(NodeConfig))
OTHER_FIELDS = [(f"{model.__name__}.{path}", field, kind) for model in (DemoSection, Grid, ModelSpec, Condition,
                                                                          QuickSettings)
                for path, field, kind in numeric_fields(model)]


def upper_bound(field: FieldInfo) -> float:
    bounds = [m.le for m in field.metadata if isinstance(m, annotated_types.Le)]
    bounds += [m.lt for m in field.metadata if isinstance(m, annotated_types.Lt)]
    assert len(bounds) <= 1, f"two upper bounds: the last one written would win silently ({bounds})"
    return bounds[0] if bounds else math.inf


def test_the_walk_finds_the_settings_it_should():
    paths = {path for path, _, _ in NODE_FIELDS}
    assert {"model.seed", "generation.max_new_tokens", "swarm.poll_interval_s", "trainer.learning_rate",
            "task.arithmetic.seed", "model.warmup.steps", "generation.vllm.max_model_len"} <= paths
    assert len(NODE_FIELDS) > 70 and len(OTHER_FIELDS) > 10


@pytest.mark.parametrize(("path", "field", "kind"), NODE_FIELDS + OTHER_FIELDS, ids=lambda x: x if isinstance(
    x, str) else "")
def test_every_numeric_setting_is_bounded_above_and_finite(path, field, kind):
    """An integer has an upper bound (Python's are unbounded); a float is finite unless +inf has a stated meaning."""
    if kind is int:
        assert upper_bound(field) < 2**63, f"{path} has no upper bound"
    allows_infinity = (field.json_schema_extra or {}).get("allow_inf_nan") or any(
        getattr(m, "allow_inf_nan", False) for m in field.metadata)
    if kind is float and path in INFINITY_MEANS_OFF:
        assert "inf" in (field.description or ""), f"{path}: say what infinity means"
    elif kind is float:
        assert not allows_infinity, f"{path} takes infinity without saying what it means"
    assert Section.model_config.get("allow_inf_nan") is False


def nested(path: str, value: object) -> dict:
    data: dict = {}
    *sections, key = path.split(".")
    at = data
    for section in sections:
        at = at.setdefault(section, {})
    at[key] = value
    return data


@pytest.mark.parametrize(("path", "field", "kind"), NODE_FIELDS, ids=[path for path, _, _ in NODE_FIELDS])
def test_hostile_values_are_refused_with_the_key_named_or_mean_what_the_setting_says(path, field, kind):
    for value in HOSTILE:
        try:
            config = NodeConfig.model_validate(nested(path, value))
        except ValidationError as error:
            message = describe_validation_error(error)  # a check across settings names its section and the key
            assert path.rsplit(".", 1)[-1] in message and path.rsplit(".", 1)[0] in message, (path, value, message)
            continue
        taken = _get(config, path)
        description = field.description or ""
        assert not (isinstance(taken, float) and math.isnan(taken)), (path, "NaN taken")
        assert value != -1 and (value != 2**63 or path in INFINITY_MEANS_OFF), (path, value, "taken")
        if isinstance(taken, float) and math.isinf(taken):
            assert path in INFINITY_MEANS_OFF, (path, "inf taken")
        if value == 0 and kind is int and upper_bound(field) != MAX_SEED:
            assert "0" in description, f"{path} takes 0: its description must say what 0 means"


def _get(config: BaseModel, path: str) -> object:
    value: object = config
    for part in path.split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize("value", ["-1", "inf", "nan", str(2**63 - 1)])
@pytest.mark.parametrize("key", ["model.seed", "generation.max_new_tokens", "swarm.poll_interval_s",
                                 "trainer.learning_rate", "task.arithmetic.seed", "loop.round_deadline_s"])
def test_a_config_file_with_such_a_value_is_refused_naming_the_key(tmp_path: Path, key: str, value: str):
    section, name = key.rsplit(".", 1)
    (tmp_path / "node.toml").write_text(f"[{section}]\n{name} = {value}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "node.toml")
    assert f"{key}:" in str(caught.value)


@pytest.mark.parametrize("value", [0, 2**32 - 1])
def test_seeds_take_the_whole_32_bit_range(value):
    config = NodeConfig.model_validate({"model": {"seed": value}, "task": {"arithmetic": {"seed": value}},
                                        "loop": {"swarm_seed": value}})
    assert config.model.seed == config.task.arithmetic.seed == config.loop.swarm_seed == value


def test_infinity_turns_the_losss_truncation_and_filter_off_and_its_schedule_stays_defined():
    config = NodeConfig.model_validate({"loss": {"clip_c": "inf", "divergence_threshold": "inf",
                                                 "divergence_threshold_end": 2.0, "divergence_schedule_steps": 10}})
    assert config.loss.clip_c == math.inf
    assert [config.loss.divergence_threshold_at(step) for step in (0, 5, 10, 20)] == [math.inf, math.inf, 2.0, 2.0]
    rising = NodeConfig.model_validate({"loss": {"divergence_threshold": 2.0, "divergence_threshold_end": "inf",
                                                 "divergence_schedule_steps": 10}}).loss
    assert [rising.divergence_threshold_at(step) for step in (0, 5, 10)] == [2.0, math.inf, math.inf]
