"""What the build counted while it wrote a dataset, read from the manifest's "statistics".

`tpufeed build` and `WriteShards` count, in the pass that writes the shards (each worker its
part, merged exactly: `tpufeed.sources.built.length_histogram`):

    "statistics": {"version": 2, "num_records": 10,
                   "record_bytes": {"count": 10, "min": 12, "max": 90, "sum": 400,
                                    "mean": 40.0, "histogram": [[12, 12, 1], ...]},
                   "fields": {"tokens": {"count": 10, "types": ["ndarray:int32"],
                                         "shape": [null], "ndims": [1],
                                         "lengths": {...as record_bytes...}}, ...},
                   "inputs": [{"path": "raw/a.jsonl", "read": 6, "records": 6}, ...] | null}

A field's shape is its arrays' dimensions where every record agrees and null where they vary
(`ndims` lists the numbers of dimensions seen: a field whose number varies has shape null).
Lengths are an array's first dimension, or the bytes or characters of a bytes or str value.
`inputs` are the build's input files in order, each with the records read from it and the
records of the dataset made from them (null where the records came from a `WriteShards`
PCollection, which has no files). A manifest written before statistics were recorded (no
"version") opens as before, and each figure says "not recorded". Version 2 statistics are
checked when first asked for (never on a read of the records): anything malformed is a
`CorruptDataError` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tpufeed.errors import CorruptDataError
from tpufeed.sources.built.length_histogram import bucket_edges, bucket_of

__all__ = [
    "NOT_RECORDED",
    "STATISTICS_VERSION",
    "DatasetStatistics",
    "FieldStatistics",
    "InputCount",
    "LengthCounts",
]

STATISTICS_VERSION = 2
NOT_RECORDED = "not recorded"


@dataclass(frozen=True)
class LengthCounts:
    """A histogram of lengths: count, min, max, sum, and rows (lowest, highest, count) of the
    non-empty buckets in order."""

    count: int
    min: int | None
    max: int | None
    sum: int
    rows: tuple[tuple[int, int, int], ...]

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count else None

    def bounded_rows(self) -> tuple[tuple[int, int, int], ...]:
        """The rows with the first's lowest raised to `min` and the last's highest lowered to
        `max`: the lengths each row can hold."""
        if not self.rows or self.min is None or self.max is None:
            return self.rows
        rows = list(self.rows)
        low, high, n = rows[0]
        rows[0] = max(low, self.min), high, n
        low, high, n = rows[-1]
        rows[-1] = low, min(high, self.max), n
        return tuple(rows)

    def share_longer(self, length: int) -> float:
        """The share of lengths above `length` (within a bucket, as if spread evenly)."""
        if not self.count:
            return 0.0
        above = 0.0
        for low, high, n in self.bounded_rows():
            if low > length:
                above += n
            elif high > length:
                above += n * (high - length) / (high - low + 1)
        return above / self.count

    def quantile(self, share: float) -> int:
        """The length at or below which `share` of the lengths lie (a bucket's highest, at
        most the greatest length)."""
        seen, want = 0, share * self.count
        for _, high, n in self.bounded_rows():
            seen += n
            if seen >= want:
                return high
        return self.max or 0

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "min": self.min,
            "max": self.max,
            "sum": self.sum,
            "mean": None if self.mean is None else round(self.mean, 6),
            "histogram": [list(row) for row in self.rows],
        }


@dataclass(frozen=True)
class FieldStatistics:
    """One field: the records holding it, the types and shape seen, its lengths (if any)."""

    count: int
    types: tuple[str, ...]
    shape: tuple[int | None, ...] | None
    ndims: tuple[int, ...]
    lengths: LengthCounts | None


@dataclass(frozen=True)
class InputCount:
    """One input file of the build: records read from it, and records of the dataset."""

    path: str
    read: int
    records: int


@dataclass(frozen=True)
class DatasetStatistics:
    """The statistics a dataset's build recorded (`Dataset.statistics`); `recorded` False, and
    `why` saying why, for a dataset whose build recorded none (each figure is then None)."""

    recorded: bool
    why: str | None = None
    num_records: int | None = None
    record_bytes: LengthCounts | None = None
    fields: dict[str, FieldStatistics] | None = None
    inputs: tuple[InputCount, ...] | None = None

    @classmethod
    def none(cls, why: str) -> DatasetStatistics:
        return cls(False, why)

    @classmethod
    def of_manifest(cls, manifest: dict[str, Any], where: str) -> DatasetStatistics:
        """The statistics of a checked manifest; raises CorruptDataError naming `where` and
        the field where version 2 statistics are malformed."""
        data = manifest.get("statistics")
        if not isinstance(data, dict) or "version" not in data:
            return cls.none("the dataset was built before tpufeed recorded statistics")
        if data["version"] != STATISTICS_VERSION:
            return cls.none(
                f"statistics version {data['version']!r} (this tpufeed reads version "
                f"{STATISTICS_VERSION}: a newer tpufeed built it?)"
            )
        return _Reader(where).statistics(data, manifest["num_records"])

    def to_json(self) -> dict[str, Any]:
        """As `tpufeed inspect --json` prints them: each figure not recorded is the string
        "not recorded"."""
        if not self.recorded:
            return {"recorded": False, "why": self.why}
        fields = {
            name: {
                "count": f.count,
                "types": list(f.types),
                "shape": None if f.shape is None else list(f.shape),
                "ndims": list(f.ndims),
                "lengths": NOT_RECORDED if f.lengths is None else f.lengths.to_json(),
            }
            for name, f in (self.fields or {}).items()
        }
        inputs: Any = NOT_RECORDED
        if self.inputs is not None:
            inputs = [{"path": i.path, "read": i.read, "records": i.records} for i in self.inputs]
        return {
            "recorded": True,
            "num_records": self.num_records,
            "record_bytes": None if self.record_bytes is None else self.record_bytes.to_json(),
            "fields": fields,
            "inputs": inputs,
        }


class _Reader:
    """Checks version 2 statistics field by field, naming the manifest and the field."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, field: str, why: str) -> CorruptDataError:
        return CorruptDataError(
            f"{self.where}: manifest field statistics.{field} {why}", path=self.where
        )

    def count(self, value: Any, field: str) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 63:
            raise self.fail(field, f"is {value!r:.60}, not a count")
        return value

    def obj(self, value: Any, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(field, f"is {type(value).__name__}, not an object")
        return value

    def statistics(self, data: dict[str, Any], num_records: int) -> DatasetStatistics:
        if self.count(data.get("num_records"), "num_records") != num_records:
            raise self.fail(
                "num_records", f"is {data['num_records']}, the shards hold {num_records}"
            )
        record_bytes = self.lengths(data.get("record_bytes"), "record_bytes")
        if record_bytes.count != num_records:
            raise self.fail("record_bytes.count", f"is {record_bytes.count}, not {num_records}")
        fields = {
            self.name(name): self.field(value, f"fields.{name}", num_records)
            for name, value in self.obj(data.get("fields"), "fields").items()
        }
        return DatasetStatistics(
            True, None, num_records, record_bytes, fields, self.inputs(data, num_records)
        )

    def name(self, name: str) -> str:
        if not name:
            raise self.fail("fields", "names a field ''")
        return name

    def field(self, value: Any, field: str, num_records: int) -> FieldStatistics:
        value = self.obj(value, field)
        count = self.count(value.get("count"), f"{field}.count")
        if count > num_records:
            raise self.fail(f"{field}.count", f"is {count}, more than the {num_records} records")
        types = value.get("types")
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise self.fail(f"{field}.types", f"is {types!r:.60}, not a list of type names")
        ndims = value.get("ndims")
        if not isinstance(ndims, list):
            raise self.fail(f"{field}.ndims", f"is {ndims!r:.60}, not a list of counts")
        ndims = [self.count(n, f"{field}.ndims") for n in ndims]
        shape = value.get("shape")
        if shape is not None:
            if not isinstance(shape, list):
                raise self.fail(f"{field}.shape", f"is {shape!r:.60}, not a list or null")
            shape = tuple(None if d is None else self.count(d, f"{field}.shape") for d in shape)
        lengths = None
        if "lengths" in value:
            lengths = self.lengths(value["lengths"], f"{field}.lengths")
            if lengths.count > count:
                raise self.fail(f"{field}.lengths.count", f"is more than the field's {count}")
        return FieldStatistics(count, tuple(types), shape, tuple(ndims), lengths)

    def lengths(self, value: Any, field: str) -> LengthCounts:
        value = self.obj(value, field)
        count = self.count(value.get("count"), f"{field}.count")
        total = self.count(value.get("sum"), f"{field}.sum")
        rows = value.get("histogram")
        if not isinstance(rows, list):
            raise self.fail(f"{field}.histogram", f"is {rows!r:.60}, not a list of rows")
        checked = tuple(self.row(row, f"{field}.histogram[{i}]") for i, row in enumerate(rows))
        if any(a[1] >= b[0] for a, b in zip(checked, checked[1:])):
            raise self.fail(f"{field}.histogram", "rows are not in order of their lengths")
        if sum(n for _, _, n in checked) != count:
            raise self.fail(f"{field}.histogram", f"counts do not add up to {count}")
        low = checked[0][0] if checked else None
        high = checked[-1][1] if checked else None
        given_min, given_max = value.get("min"), value.get("max")
        if count and not (
            isinstance(given_min, int)
            and isinstance(given_max, int)
            and low is not None
            and high is not None
            and low <= given_min <= given_max <= high
            and given_min * count <= total <= given_max * count
        ):
            raise self.fail(field, "min, max and sum do not fit its histogram")
        if not count and (total or given_min is not None or given_max is not None):
            raise self.fail(field, "has no lengths but a min, max or sum")
        return LengthCounts(count, given_min, given_max, total, checked)

    def row(self, row: Any, field: str) -> tuple[int, int, int]:
        if not isinstance(row, list) or len(row) != 3:
            raise self.fail(field, f"is {row!r:.60}, not [lowest, highest, count]")
        low, high, n = (self.count(v, field) for v in row)
        if (low, high) != bucket_edges(int(bucket_of(np.array([low]))[0])) or not n:
            raise self.fail(field, f"is {row!r:.60}, not a non-empty bucket of the fixed edges")
        return low, high, n

    def inputs(self, data: dict[str, Any], num_records: int) -> tuple[InputCount, ...] | None:
        value = data.get("inputs")
        if value is None:
            return None
        if not isinstance(value, list):
            raise self.fail("inputs", f"is {value!r:.60}, not a list or null")
        out = []
        for i, item in enumerate(value):
            item = self.obj(item, f"inputs[{i}]")
            path = item.get("path")
            if not isinstance(path, str):
                raise self.fail(f"inputs[{i}].path", f"is {path!r:.60}, not a path")
            read = self.count(item.get("read"), f"inputs[{i}].read")
            out.append(
                InputCount(path, read, self.count(item.get("records"), f"inputs[{i}].records"))
            )
        if sum(i.records for i in out) != num_records:
            raise self.fail("inputs", f"records do not add up to the {num_records} records")
        return tuple(out)
