"""Feature plumbing for dict elements: keep some keys, rename keys, cast values.

Each is a picklable callable usable as `Dataset.map(fn)` and as a `tpufeed build --transform`.
A missing key or a value that does not convert raises KeyError / ValueError naming the key;
the pipeline wraps it with the record and file.

>>> Cast({"label": "int64"})(Rename({"y": "label"})(Select(["y"])({"y": "3", "z": 1})))
{'label': array(3)}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpufeed.errors import InvalidArgumentError

__all__ = ["Cast", "Rename", "Select"]

_TRUE_WORDS = ["true", "1", "yes"]
_BOOL_WORDS = _TRUE_WORDS + ["false", "0", "no"]


def _check_element(element: Any, what: str) -> dict[str, Any]:
    if not isinstance(element, dict):
        raise TypeError(f"{what} needs a dict element, got {type(element).__name__}")
    return element


def _missing(key: str, element: dict[str, Any]) -> KeyError:
    return KeyError(f"key {key!r} is missing (the element has {sorted(element)})")


@dataclass(frozen=True)
class Select:
    """Keeps only `keys`, in that order; `missing_ok` skips keys that are absent."""

    keys: Sequence[str]
    missing_ok: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.keys, str) or not all(isinstance(k, str) for k in self.keys):
            raise InvalidArgumentError(f"Select needs a list of str keys, got {self.keys!r}")
        object.__setattr__(self, "keys", tuple(self.keys))

    def __call__(self, element: dict[str, Any]) -> dict[str, Any]:
        element = _check_element(element, "Select")
        out = {}
        for key in self.keys:
            if key in element:
                out[key] = element[key]
            elif not self.missing_ok:
                raise _missing(key, element)
        return out


@dataclass(frozen=True)
class Rename:
    """Renames keys by `mapping` {old: new}; other keys stay. A name clash is an error."""

    mapping: Mapping[str, str]

    def __post_init__(self) -> None:
        if not isinstance(self.mapping, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.mapping.items()
        ):
            raise InvalidArgumentError(
                f"Rename needs a {{old: new}} dict of str, got {self.mapping!r}"
            )
        targets = list(self.mapping.values())
        if len(set(targets)) != len(targets):
            raise InvalidArgumentError(f"Rename maps two keys to one name: {dict(self.mapping)}")

    def __call__(self, element: dict[str, Any]) -> dict[str, Any]:
        element = _check_element(element, "Rename")
        out = {}
        for key, value in element.items():
            new = self.mapping.get(key, key)
            if new in out or (new != key and new in element and new not in self.mapping):
                raise ValueError(f"Rename {key!r} -> {new!r} clashes with the existing key {new!r}")
            out[new] = value
        for key in self.mapping:
            if key not in element:
                raise _missing(key, element)
        return out


@dataclass(frozen=True)
class Cast:
    """Converts values to numpy dtypes: {key: "float32", ...}; str values are parsed ("3.5").

    The result is a numpy array of the same shape (0-d for a scalar).
    """

    dtypes: Mapping[str, str | type | np.dtype]

    def __post_init__(self) -> None:
        try:
            resolved = {key: np.dtype(dtype) for key, dtype in dict(self.dtypes).items()}
        except TypeError as e:
            raise InvalidArgumentError(f"Cast: bad dtype in {self.dtypes!r}: {e}") from e
        bad = {k: str(d) for k, d in resolved.items() if d.kind not in "biufc"}
        if bad:
            raise InvalidArgumentError(f"Cast converts to numeric dtypes only, got {bad}")
        object.__setattr__(self, "dtypes", resolved)

    def __call__(self, element: dict[str, Any]) -> dict[str, Any]:
        element = _check_element(element, "Cast")
        out = dict(element)
        for key, dtype in self.dtypes.items():
            if key not in element:
                raise _missing(key, element)
            value = element[key]
            if isinstance(value, bytes):
                value = value.decode("utf-8")
            try:
                arr = np.asarray(value)
                if arr.dtype.kind == "U" and np.dtype(dtype).kind == "b":
                    words = np.char.lower(np.char.strip(arr))
                    if not np.isin(words, _BOOL_WORDS).all():
                        raise ValueError("expected true/false/1/0/yes/no")
                    arr = np.isin(words, _TRUE_WORDS)
                out[key] = arr.astype(dtype)
            except (ValueError, TypeError, OverflowError) as e:
                raise ValueError(
                    f"key {key!r}: cannot cast {value!r:.60} to {dtype}: {e}"
                ) from None
        return out
