"""`tpufeed build` over Parquet inputs: rows in file order, bad rows named by file and row."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("apache_beam")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

import tpufeed  # noqa: E402
from tpufeed.beam import BuildConfig, build  # noqa: E402
from tpufeed.beam.read.inputs import expand_inputs  # noqa: E402
from tpufeed.errors import TransformError  # noqa: E402

_RUNNER = ("--runner=FnApiRunner",)


def _write(path, ids: range, labels: list | None = None) -> str:
    table = pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "text": [f"ré{i}" for i in ids],
            "blob": [b"b%d" % i for i in ids],
            "feat": pa.array([[float(i), i / 2] for i in ids], pa.list_(pa.float32())),
            "label": pa.array(labels if labels is not None else [i % 3 for i in ids], pa.int32()),
        }
    )
    pq.write_table(table, path, row_group_size=4)  # several row groups per file
    return str(path)


def _all(root) -> list:
    source = tpufeed.Dataset.open(root, verify=True).source
    return source.__getitems__(range(len(source)))


def test_parquet_files_build_into_a_dataset_with_the_same_records(tmp_path):
    _write(tmp_path / "a.parquet", range(0, 10))
    _write(tmp_path / "b.parquet", range(10, 13))
    assert [f.kind for f in expand_inputs([str(tmp_path / "*.parquet")])] == ["parquet"] * 2
    summary = build(
        BuildConfig(
            inputs=(str(tmp_path / "*.parquet"),),
            output=str(tmp_path / "ds"),
            num_shards=2,
            beam_args=_RUNNER,
        )
    )
    assert summary["records_in"] == 13 and summary["skipped"] == 0
    got = _all(tmp_path / "ds")
    assert [int(r["id"]) for r in got] == list(range(13))
    for i, r in enumerate(got):
        assert r["text"] == f"ré{i}" and r["blob"] == b"b%d" % i and int(r["label"]) == i % 3
        np.testing.assert_array_equal(r["feat"], np.array([i, i / 2], np.float32))


def test_a_row_with_a_null_is_a_bad_record_naming_file_and_row(tmp_path):
    path = _write(tmp_path / "in.parquet", range(6), labels=[0, 1, 2, None, 1, 0])
    with pytest.raises(TransformError, match=r"in\.parquet row 3: key 'label' is null"):
        build(BuildConfig(inputs=(path,), output=str(tmp_path / "ds"), beam_args=_RUNNER))
    summary = build(
        BuildConfig(inputs=(path,), output=str(tmp_path / "ds"), max_bad=1, beam_args=_RUNNER)
    )
    assert summary["skipped"] == 1
    assert [int(r["id"]) for r in _all(tmp_path / "ds")] == [0, 1, 2, 4, 5]
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert "in.parquet row 3: key 'label' is null" in manifest["build"]["skipped_examples"][0]


@pytest.mark.parametrize(
    "column, why",
    [
        (pa.array([[[1, 2], [3]]] * 2, pa.list_(pa.list_(pa.int64()))), "ragged"),
        (pa.array([{"x": 1}] * 2, pa.struct([("x", pa.int64())])), "dict cannot be stored"),
    ],
)
def test_ragged_lists_and_structs_are_bad_records(tmp_path, column, why):
    path = str(tmp_path / "in.parquet")
    pq.write_table(pa.table({"id": [0, 1], "v": column}), path)
    with pytest.raises(TransformError, match=rf"in\.parquet row 0: key 'v'.*{why}"):
        build(BuildConfig(inputs=(path,), output=str(tmp_path / "ds"), beam_args=_RUNNER))
