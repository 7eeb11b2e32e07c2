"""Property: a damaged manifest of a built dataset opens and reads to the right records, or
raises a named `TpufeedError`; never another exception, never other records."""

from __future__ import annotations

import json
import uuid
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tpufeed
from tests.dataset_folder import make_dataset
from tests.faults.budget import examples
from tests.faults.json_mutations import mutated
from tpufeed.errors import TpufeedError

SHARDS = [
    [{"label": i, "x": np.arange(i % 3, dtype=np.int16)} for i in range(s, s + 4)] for s in (0, 4)
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("built")
    return root, make_dataset(root, SHARDS)


def read_all(path) -> list[dict]:
    source = tpufeed.Dataset.open(path).source
    return [source[i] for i in range(len(source))]


def test_the_undamaged_manifest_reads_every_record(built):
    root, _ = built
    assert [r["label"] for r in read_all(root)] == list(range(8))


@examples(40)  # 40 in the suite, more under tests/fuzz_all.sh
@given(data=st.data())
def test_a_damaged_manifest_reads_right_or_raises_a_named_error(built, data):
    root, manifest = built
    damaged = data.draw(mutated(manifest), label="manifest")
    path = root / f"damaged-{uuid.uuid4().hex[:8]}.json"  # beside the shards: the same root
    path.write_text(json.dumps(damaged, allow_nan=True))
    try:
        records = read_all(path)
    except TpufeedError as e:
        assert str(e)  # named: a message saying what is wrong
        return
    finally:
        path.unlink()
    # Accepted: the records are the dataset's own, each once (an accepted reordering of the
    # shards may change their order, nothing else).
    expected = {r["label"]: r for shard in SHARDS for r in shard}
    assert sorted(r["label"] for r in records) == sorted(expected)
    for record in records:
        np.testing.assert_array_equal(record["x"], expected[record["label"]]["x"])


@pytest.fixture(scope="module")
def built_statistics(tmp_path_factory):
    """A dataset whose statistics name its input files too, as `tpufeed build` writes them."""
    root = tmp_path_factory.mktemp("statistics")
    manifest = make_dataset(root, SHARDS)
    manifest["statistics"]["inputs"] = [
        {"path": "raw/a.jsonl", "read": 5, "records": 4},
        {"path": "raw/b.jsonl", "read": 4, "records": 4},
    ]
    return root, manifest


@examples(40)
@given(data=st.data())
def test_damaged_statistics_read_or_raise_a_named_error_and_never_stop_a_read(
    built_statistics, data
):
    root, manifest = built_statistics
    damaged = dict(manifest, statistics=data.draw(mutated(manifest["statistics"]), label="stats"))
    path = root / f"damaged-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps(damaged, allow_nan=True))
    try:
        ds = tpufeed.Dataset.open(path)
        assert sorted(r["label"] for r in read_all(path)) == list(range(8))  # read regardless
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # damage found by pack() is a warning
            packed = ds.pack({"x": 4})
        try:
            statistics = ds.statistics
            report = statistics.to_json()
            fill = packed.expected_fill().fill if statistics.recorded else None
        except TpufeedError as e:
            assert str(e)
            return
    finally:
        path.unlink()
    assert json.dumps(report)  # what inspect --json prints
    if statistics.recorded:  # accepted: counts that add up to the dataset's
        assert statistics.num_records == 8 and statistics.record_bytes.count == 8
        assert fill is not None and 0 <= fill <= 1
