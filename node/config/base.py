"""The config mechanism every settings file shares (a node's, the demo's, the experiment's grid): ``Section``, the
base of every section; ``merged``, a partial table laid over another; ``read_toml``; and the one formatter of
validation problems (``describe_validation_error``: every problem as ``loc.path: reason``), and ``validated``,
settings a command assembled checked with them."""

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, with_config
from typing_extensions import TypedDict

from ftis.protocol.errors import UserError

M = TypeVar("M", bound=BaseModel)

# Every numeric setting is bounded by what it means (its Field says which bound): a value past one is no run a node
# can make, and would otherwise fail later, deep inside numpy, torch or asyncio. Floats are finite unless a
# setting says what infinity means (``allow_inf_nan=True``: the loss's C and g).
MAX_SEED = (1 << 32) - 1  # a seed: numpy's and torch's generators take 32 bits
MAX_SECONDS = 30 * 24 * 3600.0  # a duration or a period: a month; longer is "never" by another name
MAX_COUNT = 1 << 30  # a count: rounds, steps, problems, peers, batches, sequences
MAX_BYTES = 1 << 40  # a size in bytes (or bytes a second): a terabyte
MAX_LORA_RANK = 1 << 16  # beyond the width of any model
MAX_LEARNING_RATE = 1.0  # an AdamW step moves each weight by about the learning rate: more than 1 is no training
MAX_GRADIENT_NORM = 1e6
MAX_CONCURRENT_STREAMS = 1024  # fetches or serves at once
MAX_THREADS = 1024


class ConfigError(UserError, ValueError):
    """A config file that cannot be read or does not validate; the message lists every problem."""

    exit_code = 2  # a usage error (ftis.node.errors.USAGE, which the config does not import)


class Section(BaseModel):
    """The base of every config section: an unknown key is an error (a typo never passes silently), and a
    loaded config cannot change."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` laid over ``base``: nested tables merge key by key, anything else is replaced."""
    result = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


def validation_problems(error: ValidationError, prefix: str = "") -> list[str]:
    """Each problem of ``error`` as ``loc.path: reason``, the path under ``prefix`` when given; a problem of
    the whole model is ``(root): reason`` (or ``prefix: reason``)."""
    problems = []
    for item in error.errors():
        loc = ".".join(([prefix] if prefix else []) + [str(part) for part in item["loc"]])
        problems.append(f"{loc or '(root)'}: {item['msg']}")
    return problems


def validated(model: type[M], data: Mapping[str, Any]) -> M:
    """``model`` validated from ``data`` (settings a command assembled from its options); ``ConfigError`` with one
    ``loc.path: reason`` line per problem, each after the first led by ``error:`` as the command line prints it."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ConfigError("\nerror: ".join(validation_problems(error))) from None


def describe_validation_error(error: ValidationError, prefix: str = "") -> str:
    """Every problem of ``error`` on one line: ``loc.path: reason; ...`` (see ``validation_problems``)."""
    return "; ".join(validation_problems(error, prefix))


def partial_of(model: type[BaseModel], name: str) -> type:
    """A TypedDict of any of ``model``'s fields, each with its type, constraints and description there, and no
    other key: an override laid over a whole ``model`` later. A value is the plain dict that was written
    (``model``'s cross-field checks run on the merged result, not here)."""
    fields = {key: Annotated[(field.annotation, *field.metadata, Field(description=field.description))]
              for key, field in model.model_fields.items()}
    # The functional TypedDict form with fields known only at run time, which a type checker cannot follow.
    return with_config(ConfigDict(extra="forbid", allow_inf_nan=False))(TypedDict(name, fields, total=False))  # type: ignore[operator]


def read_toml(path: Path, error: type[Exception] = ConfigError) -> dict:
    """The TOML file ``path`` as a dict; ``error`` (a message naming the file) if unreadable or not TOML."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as problem:
        raise error(f"{path}: cannot read ({problem.strerror})") from None
    except tomllib.TOMLDecodeError as problem:
        raise error(f"{path}: not valid TOML ({problem})") from None
