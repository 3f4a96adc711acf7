"""Writing a node's settings as the TOML file ``ftis-node join --config`` reads (the standard library reads
TOML but cannot write it). Only what node settings hold: tables of strings, booleans, numbers and lists.

    write_toml(path, {"model": {"name": "tiny-small"}, "trainer": {"learning_rate": 1e-4}})
"""

import json
import math
import tomllib
from pathlib import Path
from typing import Any


class TomlWriteError(ValueError):
    """A value TOML cannot hold (None, or a type node settings never have)."""


def dumps(data: dict[str, Any]) -> str:
    """``data`` as TOML text; ``tomllib.loads`` of the result gives ``data`` back (checked)."""
    lines: list[str] = []
    _table(data, [], lines)
    text = "\n".join(lines) + "\n"
    if tomllib.loads(text) != data:  # e.g. a float that repr writes in a form TOML reads otherwise
        raise TomlWriteError("the settings do not survive a round trip through TOML")
    return text


def write_toml(path: Path, data: dict[str, Any]) -> None:
    path.write_text(dumps(data), encoding="utf-8")


def _table(data: dict[str, Any], where: list[str], lines: list[str]) -> None:
    scalars = {key: value for key, value in data.items() if not isinstance(value, dict)}
    tables = {key: value for key, value in data.items() if isinstance(value, dict)}
    if where and (scalars or not tables):
        lines.append(f"[{'.'.join(_key(part) for part in where)}]")
    for key, value in scalars.items():
        lines.append(f"{_key(key)} = {_value(value, [*where, key])}")
    for key, value in tables.items():
        if lines:
            lines.append("")
        _table(value, [*where, key], lines)


def _key(key: str) -> str:
    return key if key and all(ch.isalnum() or ch in "_-" for ch in key) else json.dumps(key)


def _value(value: Any, where: list[str]) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON's string escapes are valid in a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(item, where) for item in value) + "]"
    raise TomlWriteError(f"{'.'.join(where)}: TOML cannot hold {value!r}")
