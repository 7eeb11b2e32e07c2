"""The build's schema check: records that differ from the first one in keys or kinds of
value fail the build by file and line, or are skipped and counted under --max-bad."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("apache_beam")

import tpufeed
from tpufeed.beam import BuildConfig, build
from tpufeed.beam.read.record_schema import RecordSchema
from tpufeed.errors import SourceError

_LINES = [
    {"id": 1, "v": 2},
    {"id": 2, "v": 3, "extra": 1},  # an optional key
    {"id": 3, "v": "x"},  # another type
    {"id": 4, "v": 5},
    {"id": 5, "v": [1, 2]},  # an array where the first has an int
]


def _input(tmp_path, lines=_LINES) -> str:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return str(path)


def test_a_record_with_another_key_or_type_is_named_by_file_and_line(tmp_path):
    path = _input(tmp_path)
    with pytest.raises(SourceError) as info:
        build(BuildConfig(inputs=(path,), output=str(tmp_path / "ds")))
    message = str(info.value)
    assert (
        "in.jsonl line 2: the record has keys ['extra', 'id', 'v'], but the first record "
        f"({path} line 1) has ['id', 'v']" in message
    )
    assert "--max-bad" in message
    assert not (tmp_path / "ds" / "manifest.json").exists()


def test_max_bad_skips_and_counts_the_records_that_break_the_schema(tmp_path):
    path = _input(tmp_path)
    with pytest.raises(SourceError, match="3 bad records, more than --max-bad 2"):
        build(BuildConfig(inputs=(path,), output=str(tmp_path / "ds"), max_bad=2))
    summary = build(BuildConfig(inputs=(path,), output=str(tmp_path / "ds"), max_bad=3))
    assert summary["skipped"] == 3 and summary["records_out"] == 2
    examples = json.loads((tmp_path / "ds" / "manifest.json").read_text())["build"][
        "skipped_examples"
    ]
    assert [e.split(": ", 1)[0].rsplit(" ", 2)[-2:] for e in examples] == [
        ["line", "2"],
        ["line", "3"],
        ["line", "5"],
    ]
    assert "key 'v' is str 'x', but it is int in the first record" in examples[1]
    assert "key 'v' is int64 array of 1 dims array([1, 2])" in examples[2]
    batch = next(iter(tpufeed.Dataset.open(tmp_path / "ds").batch(2)))  # the batch works
    assert batch["id"].tolist() == [1, 4]


def test_the_first_record_is_the_one_the_transforms_make(tmp_path):
    """The reference is the transforms' output: a transform that gives every record one
    schema makes a mixed input good, and a first input line that is malformed is passed over."""
    path = _input(tmp_path, ["nope", *_LINES])
    (tmp_path / "t.py").write_text("def one(r):\n    return {'id': r['id']}\n")
    summary = build(
        BuildConfig(
            inputs=(path,),
            output=str(tmp_path / "ds"),
            transforms=(f"{tmp_path}/t.py:one",),
            max_bad=1,
        )
    )
    assert summary["records_out"] == 5 and summary["skipped"] == 1


def test_lengths_may_differ_but_not_dims_or_dtypes():
    schema = RecordSchema.of({"x": np.zeros((2, 3), np.float32), "s": "a"}, "a line 1")
    assert schema.mismatch({"x": np.zeros((5, 1), np.float32), "s": "longer"}) is None
    assert schema.mismatch({"x": np.zeros(6, np.float32), "s": "a"}) == (
        "key 'x' is float32 array of 1 dims array([0., 0., 0., 0., 0., 0.], dtype..., but it "
        "is float32 array of 2 dims in the first record (a line 1)"
    )
    assert "is float64 array of 2 dims" in schema.mismatch({"x": np.zeros((2, 3)), "s": "a"})
    assert (
        schema.mismatch(b"raw") == "the record is bytes, but the first record (a line 1) is a dict"
    )
    assert RecordSchema.of(b"raw", "f record 0").mismatch(b"other") is None
