"""Figures declared once: a dataclass field made with ``figure(...)`` says where its value goes, and every
output follows from that declaration. ``StepFigures`` (``trainer/step_figures.py``) declares the training
step's figures, ``RoundReport`` (``records/round_report.py``) a round's; ``records/metrics.py`` and
``records/display.py`` read the declarations, never a list of names of their own.

- ``record(figures)``: the flat ``metrics.jsonl`` record of a dataclass of figures, in field order. A plain
  figure is one key, its field's name; a section (``prefix`` set) spreads its value under the prefix: a
  dataclass of figures gives its own figures, a dict of counters its entries.
- ``scalars(cls, record)``: a record's TensorBoard scalars, by ``tag``: a number is one scalar; a dict one
  scalar per entry, ``tag/key`` (and the entries' sum under ``total``); a list its length; a section's dict
  of counters one per counter, ``tag/<its record key without the prefix "<tag>_">``.

TensorBoard reads the flat record: the record is the one source of every output.
"""

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from typing import Any, Literal

Combine = Literal["sequences", "tokens", "off_policy", "max"]
Unit = Literal["fraction", "count", "value"]  # how the terminal writes it: a percentage, an integer, 3 digits


@dataclass(frozen=True)
class Figure:
    """Where one figure goes besides ``metrics.jsonl``."""

    combine: Combine | None = None  # a figure of the loss: how micro-batches combine (step_figures.py)
    tag: str | None = None  # TensorBoard
    every_step: bool = False  # a training figure also tagged for steps not taken (figures that mean something then)
    shown: bool = False  # the terminal shows it
    unit: Unit = "value"
    prefix: str | None = None  # a section: its value's figures or counters enter the record under this prefix
    total: str | None = None  # a dict figure: the sum of its entries, also tagged under this
    optional: bool = False  # left out of the record when None (measured only sometimes)


_FIGURE = "figure"  # the key of a field's Figure in its metadata


def figure(default: Any = 0.0, *, factory: Any = None, init: bool = True, **where: Any) -> Any:
    """A field that is a figure: its default (``default``, or ``factory()``) and its ``Figure``."""
    metadata = {_FIGURE: Figure(**where)}
    if factory is not None:
        return field(default_factory=factory, init=init, metadata=metadata)
    return field(default=default, init=init, metadata=metadata)


def declared(cls: type) -> dict[str, Figure]:
    """The figures a dataclass declares, by field name, in field order (fields that are no figure left out)."""
    return {f.name: f.metadata[_FIGURE] for f in fields(cls) if _FIGURE in f.metadata}


def record(figures: object) -> dict[str, Any]:
    """The flat record of a dataclass of figures (see the module docstring)."""
    flat: dict[str, Any] = {}
    for name, where in declared(type(figures)).items():
        value = getattr(figures, name)
        if where.prefix is None:
            if value is not None or not where.optional:
                flat[name] = _plain(value)
        elif is_dataclass(value):
            flat |= {where.prefix + key: inner for key, inner in record(value).items()}
        else:
            flat |= {where.prefix + key: _plain(inner) for key, inner in value.items()}
    return flat


def _plain(value: object) -> object:
    """A copy made of JSON's kinds: dataclasses inside become dicts (as ``dataclasses.asdict`` makes them)."""
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    if isinstance(value, Mapping):
        return {key: _plain(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_plain(inner) for inner in value)
    return value


def scalars(cls: type, flat: Mapping[str, Any]) -> dict[str, object]:
    """The TensorBoard scalars, by tag, of ``flat``, the record of a ``cls`` (``record``); a training figure not
    ``every_step`` only when its step was taken (``trained``). Values as they are (the caller leaves out None
    and NaN)."""
    tagged: dict[str, object] = {}
    taken = flat.get("trained", True)
    for f in fields(cls):
        where = f.metadata.get(_FIGURE)
        if where is None:
            continue
        if where.prefix is not None and isinstance(f.type, type) and is_dataclass(f.type):
            tagged |= scalars(f.type, {key[len(where.prefix):]: value for key, value in flat.items()
                                       if key.startswith(where.prefix)})
        elif where.prefix is not None and where.tag is not None:  # a dict of counters, spread in the record
            own = where.tag + "_"
            tagged |= {f"{where.tag}/{key.removeprefix(own)}": value for key, value in flat.items()
                       if key.startswith(where.prefix) and isinstance(value, int | float)}
        elif where.tag is not None and f.name in flat and (taken or where.every_step):
            tagged |= _tagged(where.tag, where.total, flat[f.name])
    return tagged



def _tagged(tag: str, total: str | None, value: object) -> dict[str, object]:
    if isinstance(value, Mapping):
        entries = {f"{tag}/{key}": count for key, count in value.items()}
        return entries | ({total: sum(value.values())} if total else {})
    if isinstance(value, list | tuple):
        return {tag: len(value)}
    return {tag: value}
