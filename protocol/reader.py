"""A typed, strict view of one decoded msgpack map: every accessor checks the type and range of
one field and raises ``DecodeError`` naming its path; ``done()`` refuses keys the schema lacks."""

import math
from typing import Any

from ftis.protocol.errors import DecodeError


class FieldReader:
    def __init__(self, value: Any, path: str):
        if not isinstance(value, dict):
            raise DecodeError(path or "envelope", f"expected a map, got {type(value).__name__}")
        self._map = value
        self._path = path
        self._seen: set[str] = set()

    def _get(self, key: str) -> Any:
        self._seen.add(key)
        if key not in self._map:
            raise DecodeError(self._at(key), "missing")
        return self._map[key]

    def _at(self, key: str) -> str:
        return f"{self._path}.{key}" if self._path else key

    def map(self, key: str) -> "FieldReader":
        return FieldReader(self._get(key), self._at(key))

    def optional_map(self, key: str) -> "FieldReader | None":
        """The map at ``key``, or None when the key is absent (a field a version may leave out)."""
        self._seen.add(key)
        return self.map(key) if key in self._map else None

    def text(self, key: str, max_chars: int, *, allow_empty: bool = False) -> str:
        value = self._get(key)
        if type(value) is not str:
            raise DecodeError(self._at(key), f"expected a string, got {type(value).__name__}")
        if len(value) > max_chars:
            raise DecodeError(self._at(key), f"longer than {max_chars} characters")
        if not value and not allow_empty:
            raise DecodeError(self._at(key), "must not be empty")
        return value

    def choice(self, key: str, choices: tuple[str, ...]) -> str:
        value = self.text(key, max(len(c) for c in choices))
        if value not in choices:
            raise DecodeError(self._at(key), f"must be one of {choices}, got {value!r}")
        return value

    def integer(self, key: str, low: int, high: int) -> int:
        value = self._get(key)
        if type(value) is not int:  # bool is an int subclass: refused too
            raise DecodeError(self._at(key), f"expected an integer, got {type(value).__name__}")
        if not low <= value <= high:
            raise DecodeError(self._at(key), f"must be in [{low}, {high}], got {value}")
        return value

    def number(self, key: str, low: float, high: float) -> float:
        """A finite number in [low, high]; an integer is accepted (other encoders write 1.0 as 1)."""
        value = self._get(key)
        if type(value) not in (float, int):
            raise DecodeError(self._at(key), f"expected a number, got {type(value).__name__}")
        value = float(value)
        if not math.isfinite(value) or not low <= value <= high:
            raise DecodeError(self._at(key), f"must be a finite number in [{low}, {high}], got {value}")
        return value

    def text_list(self, key: str, count: int, max_chars: int, *, allow_empty: bool = False) -> list[str]:
        values = self.array(key, count, count)
        for i, value in enumerate(values):
            if type(value) is not str or len(value) > max_chars or not (value or allow_empty):
                raise DecodeError(f"{self._at(key)}[{i}]", f"expected a {'' if allow_empty else 'non-empty '}"
                                  f"string of at most {max_chars} characters, got {_describe(value)}")
        return values

    def integer_list(self, key: str, count: int, low: int, high: int) -> list[int]:
        values = self.array(key, count, count)
        for i, value in enumerate(values):
            if type(value) is not int or not low <= value <= high:
                raise DecodeError(
                    f"{self._at(key)}[{i}]", f"expected an integer in [{low}, {high}], got {_describe(value)}"
                )
        return values

    def blob(self, key: str, max_bytes: int, *, multiple_of: int = 1) -> bytes:
        value = self._get(key)
        if type(value) is not bytes:
            raise DecodeError(self._at(key), f"expected binary data, got {type(value).__name__}")
        if len(value) > max_bytes:
            raise DecodeError(self._at(key), f"longer than {max_bytes} bytes")
        if len(value) % multiple_of:
            raise DecodeError(self._at(key), f"length {len(value)} is not a multiple of {multiple_of}")
        return value

    def array(self, key: str, min_items: int, max_items: int) -> list[Any]:
        value = self._get(key)
        if type(value) is not list:
            raise DecodeError(self._at(key), f"expected an array, got {type(value).__name__}")
        if not min_items <= len(value) <= max_items:
            expected = min_items if min_items == max_items else f"{min_items} to {max_items}"
            raise DecodeError(self._at(key), f"must hold {expected} items, got {len(value)}")
        return value

    def path(self, key: str) -> str:
        return self._at(key)

    @property
    def location(self) -> str:
        return self._path

    def done(self) -> None:
        extra = sorted(str(k) for k in self._map if k not in self._seen)
        if extra:
            raise DecodeError(self._path or "envelope", f"unknown fields {extra}")


def _describe(value: Any) -> str:
    if type(value) is str:
        return f"a string of {len(value)} characters"
    return f"{value!r}" if type(value) is int else type(value).__name__
