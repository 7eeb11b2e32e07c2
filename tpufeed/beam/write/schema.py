"""Schema and length statistics of a set of records, mergeable across shards and workers.

A `RecordSummary` is built per shard while the shard is written, travels as JSON, and the
summaries of all shards are merged in shard order, so the result does not depend on how the
work was split. For dict records it infers, per key: the value type, the dtype, the shape
(`None` for a dimension that varies between records: a ragged dimension) and in how many
records the key is present; and a histogram of lengths (an array's first dimension, bytes,
characters) in fixed buckets (`tpufeed.sources.built.length_histogram`), which is what
sequence packing and batch autotuning need.

>>> s = RecordSummary(); s.add({"x": np.zeros(3, np.int32)}, 40); s.add({"x": np.zeros(5, np.int32)}, 48)
>>> s.schema()["x"]["shape"], s.statistics()["fields"]["x"]["lengths"]["max"]
([None], 5)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tpufeed.sources.built.length_histogram import LengthHistogram
from tpufeed.sources.built.statistics import STATISTICS_VERSION

__all__ = ["RecordSummary"]

_SCALAR_TYPES = ((bool, "bool"), (int, "int"), (float, "float"), (bytes, "bytes"), (str, "str"))
_EXACT_SCALARS: dict[type, str] = {kind: name for kind, name in _SCALAR_TYPES}


class _KeySummary:
    """What one key's values looked like: types seen, dtype, shape (None where it varies)."""

    def __init__(self) -> None:
        self.types: set[str] = set()
        self.shape: list[int | None] | None = None
        self.ndims: set[int] = set()
        self.present = 0
        self.length = LengthHistogram()
        self._last_dtype: Any = None
        self._last_shape: tuple[int, ...] | None = None
        self._last_type: str | None = None

    def add(self, value: Any) -> None:
        self.present += 1
        cls = type(value)
        if cls is np.ndarray or isinstance(value, np.ndarray):
            # Adding the dtype or shape added last again changes nothing: skip the work.
            # (None first: numpy compares a float64 dtype equal to None, its default dtype)
            if self._last_dtype is None or value.dtype != self._last_dtype:
                self._last_dtype = value.dtype
                self.types.add(f"ndarray:{value.dtype.name}")
            shape = value.shape
            if shape != self._last_shape:
                self._last_shape = shape
                self._add_shape(list(shape))
            if shape:
                self.length.add(shape[0])
            return
        name = _EXACT_SCALARS.get(cls)
        if name is not None:
            if name != self._last_type:
                self._last_type = name
                self.types.add(name)
            if cls is str or cls is bytes:
                self.length.add(len(value))
            return
        for kind, name in _SCALAR_TYPES:
            if isinstance(value, kind):
                self.types.add(name)
                if isinstance(value, (bytes, str)):
                    self.length.add(len(value))
                return
        self.types.add(type(value).__name__)

    def add_many(self, values: list[Any]) -> None:
        """`add` of each value; values of one exact type (the usual case) in a few passes."""
        kinds = set(map(type, values))
        cls = kinds.pop() if len(kinds) == 1 else None
        if cls is np.ndarray:
            self.present += len(values)
            for dtype in dict.fromkeys(v.dtype for v in values):
                self.types.add(f"ndarray:{dtype.name}")
            shapes = [v.shape for v in values]
            for shape in dict.fromkeys(shapes):  # first seen first
                self._add_shape(list(shape))
            self.length.add_many([s[0] for s in shapes if s])
            self._last_dtype = self._last_shape = None  # `add` checks again from here
            return
        name = _EXACT_SCALARS.get(cls) if cls is not None else None
        if name is None:
            for value in values:
                self.add(value)
            return
        self.present += len(values)
        self.types.add(name)
        if cls is str or cls is bytes:
            self.length.add_many([len(v) for v in values])

    def _add_shape(self, shape: list[int | None]) -> None:
        self.ndims.add(len(shape))
        if self.shape is None:
            self.shape = shape
        elif len(self.shape) == len(shape):
            self.shape = [a if a == b else None for a, b in zip(self.shape, shape)]

    def merge(self, other: _KeySummary) -> None:
        self.types |= other.types
        self.ndims |= other.ndims
        if other.shape is not None:
            self._add_shape(other.shape)
        self.present += other.present
        self.length.merge(other.length)

    def to_json(self) -> dict[str, Any]:
        return {
            "types": sorted(self.types),
            "shape": self.shape,
            "ndims": sorted(self.ndims),
            "present": self.present,
            "length": self.length.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _KeySummary:
        out = cls()
        out.types, out.shape, out.ndims = set(data["types"]), data["shape"], set(data["ndims"])
        out.present, out.length = data["present"], LengthHistogram.from_json(data["length"])
        return out

    def schema(self, num_records: int) -> dict[str, Any]:
        types = sorted(self.types)
        out: dict[str, Any] = {}
        if len(types) == 1 and types[0].startswith("ndarray:"):
            out["type"], out["dtype"] = "ndarray", types[0].split(":", 1)[1]
            if len(self.ndims) == 1:
                out["shape"] = self.shape
                out["ragged_dims"] = [i for i, d in enumerate(self.shape or []) if d is None]
            else:  # the number of dimensions itself varies
                out["shape"], out["ndims"] = None, sorted(self.ndims)
        elif len(types) == 1:
            out["type"] = types[0]
        else:
            out["type"], out["types"] = "mixed", types
        out["present"] = self.present
        out["optional"] = self.present < num_records
        return out


class RecordSummary:
    """Mergeable schema and statistics of dict records (or of raw bytes records)."""

    def __init__(self) -> None:
        self.count = 0
        self.record_bytes = LengthHistogram()
        self.keys: dict[str, _KeySummary] = {}

    def add(self, record: dict[str, Any] | None, nbytes: int) -> None:
        """Adds one record: its decoded dict (None for a raw bytes record) and encoded size."""
        self.count += 1
        self.record_bytes.add(nbytes)
        if record is not None:
            keys = self.keys
            for key, value in record.items():
                summary = keys.get(key)
                if summary is None:
                    summary = keys[key] = _KeySummary()
                summary.add(value)

    def add_many(self, records: list[dict[str, Any] | None], sizes: list[int]) -> None:
        """`add` of each (record, size): the same result, a pass per key instead of a call
        per value where the records share their keys (as the build's schema check makes
        them)."""
        self.count += len(sizes)
        self.record_bytes.add_many(sizes)
        dicts = [r for r in records if r is not None]
        if not dicts:
            return
        keys = dicts[0].keys()
        if not all(r.keys() == keys for r in dicts):
            for record in dicts:
                for key, value in record.items():
                    self._key(key).add(value)
            return
        for key in keys:
            self._key(key).add_many([r[key] for r in dicts])

    def _key(self, key: str) -> _KeySummary:
        summary = self.keys.get(key)
        if summary is None:
            summary = self.keys[key] = _KeySummary()
        return summary

    def merge(self, other: RecordSummary) -> None:
        self.count += other.count
        self.record_bytes.merge(other.record_bytes)
        for key, summary in other.keys.items():
            if key in self.keys:
                self.keys[key].merge(summary)
            else:
                self.keys[key] = _KeySummary.from_json(summary.to_json())

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "record_bytes": self.record_bytes.to_json(),
            "keys": {k: s.to_json() for k, s in sorted(self.keys.items())},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RecordSummary:
        out = cls()
        out.count = data["count"]
        out.record_bytes = LengthHistogram.from_json(data["record_bytes"])
        out.keys = {k: _KeySummary.from_json(v) for k, v in data["keys"].items()}
        return out

    def schema(self) -> dict[str, Any]:
        """Per key (sorted): type, dtype, shape, ragged_dims, present, optional."""
        return {key: s.schema(self.count) for key, s in sorted(self.keys.items())}

    def statistics(self) -> dict[str, Any]:
        """The manifest's "statistics" (`tpufeed.sources.built.statistics` reads them), but for
        "inputs", which the build adds: record sizes in bytes, and per field its count, the
        types and shape seen, and the histogram of its lengths where it has any."""
        fields = {}
        for key, s in sorted(self.keys.items()):
            field: dict[str, Any] = {
                "count": s.present,
                "types": sorted(s.types),
                "shape": s.shape,
                "ndims": sorted(s.ndims),
            }
            if s.length.count:
                field["lengths"] = s.length.to_json()
            fields[key] = field
        return {
            "version": STATISTICS_VERSION,
            "num_records": self.count,
            "record_bytes": self.record_bytes.to_json(),
            "fields": fields,
        }
