"""A manifest's statistics as Dataset.statistics reads them: version 2 checked field by field,
a manifest of tpufeed 0.2 (statistics without a version) opening with none recorded."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

import tpufeed
from tests.dataset_folder import make_dataset
from tpufeed.errors import CorruptDataError
from tpufeed.sources.built.statistics import DatasetStatistics

RECORDS = [{"tokens": np.arange(n % 40 + 1, dtype=np.int32), "id": n} for n in range(60)]

# What tpufeed 0.2.0's build wrote under "statistics" (power-of-two buckets, per key).
OLD_STATISTICS = {
    "num_records": 60,
    "record_bytes": {"count": 60, "min": 90, "max": 250, "sum": 9000, "mean": 150.0,
                     "histogram": [[64, 127, 20], [128, 255, 40]]},
    "keys": {"tokens": {"present": 60, "length": {"count": 60, "min": 1, "max": 40, "sum": 1230,
                                                    "mean": 20.5, "histogram": [[1, 1, 2]]}}},
}  # fmt: skip


@pytest.fixture
def built(tmp_path):
    return tmp_path, make_dataset(tmp_path, [RECORDS[:30], RECORDS[30:]])


def _rewrite(root, manifest) -> None:
    (root / "manifest.json").write_text(json.dumps(manifest))


def test_a_manifest_of_tpufeed_0_2_opens_reads_and_records_none(built):
    root, manifest = built
    _rewrite(root, dict(manifest, statistics=OLD_STATISTICS, tpufeed_version="0.2.0"))
    ds = tpufeed.Dataset.open(root, verify=True)
    assert sorted(int(r["id"]) for r in ds) == list(range(60))
    assert ds.statistics == DatasetStatistics(
        False, "the dataset was built before tpufeed recorded statistics"
    )
    assert ds.statistics.to_json() == {"recorded": False, "why": ds.statistics.why}
    _rewrite(root, {k: v for k, v in manifest.items() if k != "statistics"})  # none at all
    assert not tpufeed.Dataset.open(root).statistics.recorded


def test_a_newer_version_is_not_read_and_says_so(built):
    root, manifest = built
    _rewrite(root, dict(manifest, statistics=dict(manifest["statistics"], version=3)))
    assert "statistics version 3" in tpufeed.Dataset.open(root).statistics.why


def test_version_2_reads_every_figure(built):
    root, _ = built
    stats = tpufeed.Dataset.open(root).statistics
    tokens = stats.fields["tokens"]
    assert (tokens.count, tokens.types, tokens.shape, tokens.ndims) == (
        60,
        ("ndarray:int32",),
        (None,),
        (1,),
    )
    assert (tokens.lengths.min, tokens.lengths.max, tokens.lengths.count) == (1, 40, 60)
    assert tokens.lengths.sum == sum(n % 40 + 1 for n in range(60))
    assert tokens.lengths.share_longer(40) == 0 and tokens.lengths.share_longer(0) == 1
    assert tokens.lengths.quantile(0.5) == 15 and tokens.lengths.quantile(0.99) == 40
    assert tokens.lengths.bounded_rows()[-1][1] == 40  # 40-43's bucket, bounded by max
    assert stats.inputs is None and stats.record_bytes.count == 60


def _damaged(manifest, path, value):
    damaged = copy.deepcopy(manifest)
    parent = damaged["statistics"]
    for step in path[:-1]:
        parent = parent[step]
    if value is KeyError:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return damaged


@pytest.mark.parametrize(
    "path, value, why",
    [
        (["num_records"], 59, r"statistics.num_records is 59, the shards hold 60"),
        (["num_records"], KeyError, r"statistics.num_records is None, not a count"),
        (["record_bytes", "count"], 61, r"record_bytes.histogram counts do not add up to 61"),
        (["fields"], [], r"statistics.fields is list, not an object"),
        (["fields", "id", "count"], 61, r"fields.id.count is 61, more than the 60 records"),
        (["fields", "id", "types"], "int", r"fields.id.types is 'int', not a list"),
        (["fields", "id", "ndims"], [-1], r"fields.id.ndims is -1, not a count"),
        (["fields", "tokens", "shape"], [True], r"fields.tokens.shape is True, not a count"),
        (["fields", "tokens", "lengths", "histogram", 0], [1, 2, 3], r"not a non-empty bucket"),
        (["fields", "tokens", "lengths", "histogram", 0, 2], 0, r"not a non-empty bucket"),
        (["fields", "tokens", "lengths", "sum"], 10**9, r"min, max and sum do not fit"),
        (["fields", "tokens", "lengths", "max"], 10**6, r"min, max and sum do not fit"),
        (["fields", "tokens", "lengths", "count"], 59, r"counts do not add up to 59"),
        (["inputs"], [{"path": "a", "read": 1, "records": 5}], r"do not add up to the 60"),
        (["inputs"], [{"path": 7, "read": 1, "records": 60}], r"inputs\[0\].path is 7"),
        (["inputs"], {"a": 1}, r"statistics.inputs is {'a': 1}, not a list or null"),
    ],
)
def test_damaged_statistics_are_refused_naming_the_field(built, path, value, why):
    root, manifest = built
    _rewrite(root, _damaged(manifest, path, value))
    ds = tpufeed.Dataset.open(root)
    assert len(list(ds)) == 60  # the records read: statistics are checked when asked for
    with pytest.raises(CorruptDataError, match=why) as raised:
        _ = ds.statistics
    assert str(root / "manifest.json") in str(raised.value)


def test_histogram_rows_out_of_order_are_refused(built):
    root, manifest = built
    rows = manifest["statistics"]["fields"]["tokens"]["lengths"]["histogram"]
    damaged = _damaged(manifest, ["fields", "tokens", "lengths", "histogram"], rows[::-1])
    _rewrite(root, damaged)
    with pytest.raises(CorruptDataError, match="rows are not in order"):
        _ = tpufeed.Dataset.open(root).statistics
