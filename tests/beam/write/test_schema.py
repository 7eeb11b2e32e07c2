"""Schema inference and length statistics: what they say, and that merging is order-free."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from tpufeed.beam.write.schema import RecordSummary


def _records(n: int = 40) -> list[dict]:
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        record = {
            "image": np.zeros((int(rng.integers(2, 6)), 4, 3), np.uint8),
            "tokens": np.arange(int(rng.integers(0, 30)), dtype=np.int32),
            "label": i % 3,
            "text": "x" * (i % 7),
            "blob": b"y" * i,
            "score": i / 2,
        }
        if i % 4 == 0:
            record["extra"] = True
        out.append(record)
    return out


def _summary(records: list[dict]) -> RecordSummary:
    summary = RecordSummary()
    for record in records:
        summary.add(record, 100 + len(record))
    return summary


def test_schema_names_types_shapes_and_ragged_dims():
    schema = _summary(_records()).schema()
    assert schema["image"] == {
        "type": "ndarray",
        "dtype": "uint8",
        "shape": [None, 4, 3],
        "ragged_dims": [0],
        "present": 40,
        "optional": False,
    }
    assert schema["tokens"]["shape"] == [None] and schema["tokens"]["dtype"] == "int32"
    assert schema["label"]["type"] == "int" and schema["score"]["type"] == "float"
    assert schema["text"]["type"] == "str" and schema["blob"]["type"] == "bytes"
    assert schema["extra"] == {"type": "bool", "present": 10, "optional": True}
    assert list(schema) == sorted(schema)


def test_fixed_shape_varying_ndim_and_mixed_types():
    summary = _summary(
        [
            {"a": np.zeros((2, 3)), "b": np.zeros(2), "c": 1},
            {"a": np.ones((2, 3)), "b": np.zeros((2, 2)), "c": "one"},
        ]
    )
    schema = summary.schema()
    assert schema["a"]["shape"] == [2, 3] and schema["a"]["ragged_dims"] == []
    assert schema["b"]["shape"] is None and schema["b"]["ndims"] == [1, 2]
    assert schema["c"] == {
        "type": "mixed",
        "types": ["int", "str"],
        "present": 2,
        "optional": False,
    }


def test_length_statistics_for_packing():
    records = _records()
    stats = _summary(records).statistics()
    tokens = [len(r["tokens"]) for r in records]
    got = stats["fields"]["tokens"]["lengths"]
    assert (got["count"], got["min"], got["max"], got["sum"]) == (
        40,
        min(tokens),
        max(tokens),
        sum(tokens),
    )
    assert sum(row[2] for row in got["histogram"]) == 40
    for lo, hi, n in got["histogram"]:
        assert n == sum(lo <= t <= hi for t in tokens)
    assert "lengths" not in stats["fields"]["label"]  # scalars have no length
    assert stats["fields"]["label"]["types"] == ["int"] and stats["fields"]["label"]["count"] == 40
    assert stats["fields"]["text"]["lengths"]["max"] == 6
    image = stats["fields"]["image"]  # an array's length is its first dimension
    assert image["shape"] == [None, 4, 3] and image["types"] == ["ndarray:uint8"]
    assert image["lengths"]["max"] == max(len(r["image"]) for r in records)
    assert stats["fields"]["extra"]["count"] == 10
    assert stats["record_bytes"]["count"] == 40 and stats["version"] == 2


@pytest.mark.parametrize("seed", range(4))
def test_merging_parts_in_any_split_gives_the_same_json(seed):
    records = _records()
    whole = _summary(records)
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(records)), 3))
    parts = [records[a:b] for a, b in zip([0] + cuts, cuts + [len(records)])]
    merged = RecordSummary()
    for part in parts:  # through JSON, as shard summaries travel between workers
        merged.merge(RecordSummary.from_json(json.loads(json.dumps(_summary(part).to_json()))))
    assert json.dumps(merged.schema()) == json.dumps(whole.schema())
    assert json.dumps(merged.statistics()) == json.dumps(whole.statistics())


def test_raw_bytes_records_have_sizes_only():
    summary = RecordSummary()
    for n in (0, 1, 5, 1000):
        summary.add(None, n)
    assert summary.schema() == {}
    assert summary.statistics()["record_bytes"]["histogram"] == [
        [0, 0, 1],
        [1, 1, 1],
        [5, 5, 1],
        [960, 1023, 1],
    ]


def _odd_records() -> list[dict | None]:
    """Records that leave `add_many`'s fast passes: raw records (None), a key some records
    lack, a numpy scalar among floats, arrays whose dtype and number of dimensions change."""
    out: list[dict | None] = []
    for i, record in enumerate(_records(60)):
        record = dict(record)
        if i % 9 == 4:
            record["score"] = np.float64(i)
        if i % 11 == 3:
            record["tokens"] = np.arange(6, dtype=np.int64).reshape(2, 3)
        out.append(None if i % 13 == 5 else record)
    return out


@pytest.mark.parametrize("records", [_records(60), _odd_records()], ids=["uniform", "odd"])
@pytest.mark.parametrize("chunk", [1, 7, 60])
def test_add_many_gives_what_add_gives(records, chunk):
    sizes = [100 + i * 37 for i in range(len(records))]
    one = RecordSummary()
    for record, size in zip(records, sizes):
        one.add(record, size)
    many = RecordSummary()
    for start in range(0, len(records), chunk):
        many.add_many(records[start : start + chunk], sizes[start : start + chunk])
    assert json.dumps(many.to_json()) == json.dumps(one.to_json())
    assert json.dumps(many.schema()) == json.dumps(one.schema())
