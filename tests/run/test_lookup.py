"""`ds[i]` (tpufeed.run.lookup): the element iteration makes at position i, as Grain's
`MapDataset[i]`: None where a filter drops the record, the next epochs past the first."""

from __future__ import annotations

import numpy as np
import pytest

import tpufeed
from tests.semantics.restore import plain
from tpufeed.sources.array_record import write_array_records

N = 23


def noise(e, rng):
    return {**e, "noise": int(rng.integers(0, 2**62))}


def records(n=N):
    return tpufeed.Dataset.from_sequence(list(range(n))).map(lambda r: {"id": np.int64(r)})


# name -> (a Dataset, the positions of its stream: per epoch x epochs)
PIPELINES = {
    "source": lambda: records(),
    "shuffle-repeat": lambda: records().shuffle(4).repeat(3),
    "shard": lambda: records().shuffle(4).shard(2, 3).repeat(2),
    "random_map": lambda: records().shuffle(1).random_map(noise).repeat(2),
    "random_map-seed": lambda: records().random_map(noise, seed=9).shard(0, 2).repeat(2),
    "filter": lambda: records().shuffle(2).filter(lambda e: e["id"] % 3 != 1).repeat(2),
    "everything": lambda: (
        records()
        .shuffle(5)
        .shard(1, 2)
        .map(lambda e: {**e, "double": e["id"] * 2})
        .random_map(noise)
        .filter(lambda e: e["id"] % 4 != 0)
        .random_map(noise)
        .repeat(3)
    ),
}


def positions(ds):
    """Positions of the stream of `ds` (which has epochs): what iteration runs over."""
    plan = ds._plan()
    return plan.start().stream_size(len(plan.source)) * plan.epochs


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_indexing_gives_what_iteration_gives_at_each_position(name):
    ds = PIPELINES[name]()
    indexed = [ds[i] for i in range(positions(ds))]
    assert [plain(e) for e in indexed if e is not None] == [plain(e) for e in ds]
    if name in ("filter", "everything"):
        assert None in indexed  # a dropped record is None at its position, as in Grain
    else:
        assert None not in indexed


def test_indexing_workers_and_prefetch_change_nothing():
    ds = PIPELINES["everything"]()
    busy = ds.workers(2).prefetch(3)
    assert [plain(busy[i]) for i in range(10)] == [plain(ds[i]) for i in range(10)]


def test_windowed_shuffle_of_files_indexes_as_it_iterates(tmp_path):
    paths = []
    for shard in range(4):
        paths.append(str(tmp_path / f"part-{shard}.array_record"))
        write_array_records(paths[-1], [b"%03d" % (10 * shard + i) for i in range(6)])
    ds = tpufeed.Dataset.from_array_record(paths).shuffle(3, window=2).repeat(2)
    assert [ds[i] for i in range(positions(ds))] == list(ds)


def test_past_the_first_epoch_is_the_next_epochs_permutation_as_in_grain():
    ds = records(10).shuffle(7).repeat(2)
    first = [int(ds[i]["id"]) for i in range(10)]
    second = [int(ds[i]["id"]) for i in range(10, 20)]
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != second
    forever = records(10).shuffle(7).repeat()
    assert [int(forever[i]["id"]) for i in range(10, 20)] == second
    assert forever[10**6] is not None


def test_negative_indices_count_from_the_end_and_numpy_ints_work():
    ds = records(5).repeat(2)
    assert int(ds[-1]["id"]) == 4 and int(ds[-10]["id"]) == 0
    assert int(ds[np.int64(3)]["id"]) == 3


@pytest.mark.parametrize(
    "ds,index",
    [
        (records(5), 5),
        (records(5).repeat(2), 10),
        (records(5), -6),
        (records(5).repeat(), -1),
        (records(2).shard(2, 3), 0),  # this host's share is empty
    ],
)
def test_an_index_past_the_stream_is_an_index_error_saying_its_size(ds, index):
    with pytest.raises(IndexError, match=f"index {index} is out of range"):
        ds[index]


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: records().batch(2), "batch stacks several elements"),
        (lambda: records().map(lambda e: {"t": [1]}).pack({"t": 4}), "pack fills"),
        (lambda: records().flat_map(lambda e: [e, e]), "flat_map makes any number"),
        (
            lambda: tpufeed.Dataset.mix([records(3), records(4)]),
            "a mixture cannot be indexed",
        ),
    ],
)
def test_a_pipeline_without_a_position_per_element_refuses_indexing_saying_why(make, match):
    with pytest.raises(TypeError, match=match):
        make()[0]


def test_a_slice_is_grains_slice_and_another_key_is_refused_pointing_to_shard():
    assert [int(e["id"]) for e in records()[0:4]] == [0, 1, 2, 3]  # ds.slice(slice(0, 4))
    with pytest.raises(TypeError, match=r"\.shard\(index, count\)"):
        records()["id"]
    with pytest.raises(TypeError, match="indices are ints"):
        records()[1.5]


def test_a_bad_record_raises_its_error_where_ignore_errors_would_skip_it():
    def fails_on_three(e):
        if int(e["id"]) == 3:
            raise ValueError("bad record three")
        return e

    ds = records(6).map(fails_on_three).ignore_errors(5)
    assert int(ds[2]["id"]) == 2
    with pytest.raises(tpufeed.TpufeedError, match="bad record three"):
        ds[3]
