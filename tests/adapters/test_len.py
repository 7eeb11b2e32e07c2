"""`len()` means one thing on `Dataset`, `to_tf()` and `to_torch()`: the items the pipeline
yields on this host, every epoch counted (`repeat(0)`: 0). An endless pipeline has no len()
(an UnknownLengthError, a TypeError, naming repeat()) and tf.data's infinite cardinality;
where the data decides the count, len() is refused naming the stages, and the cardinality is
unknown."""

from __future__ import annotations

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import TpufeedError, UnknownLengthError

tf = pytest.importorskip("tensorflow")
torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

N = 10


def records(n=N):
    return tpufeed.Dataset.from_sequence(list(range(n))).map(lambda r: {"id": np.int64(r)})


def counted(items):
    return sum(1 for _ in items)


KNOWN = {
    "elements": (lambda: records(), 10),
    "batches": (lambda: records().batch(4), 3),
    "drop_remainder": (lambda: records().batch(4, drop_remainder=True), 2),
    "repeat(3)": (lambda: records().batch(4).repeat(3), 9),
    "repeat(0)": (lambda: records().batch(4).repeat(0), 0),
    "a filter, repeat(0)": (lambda: records().filter(lambda e: e["id"] % 2).repeat(0), 0),
    "host 1 of 3": (lambda: records().shard(1, 3).batch(2).repeat(2), 4),
}


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_len_is_the_items_the_pipeline_yields_everywhere(name):
    make, length = KNOWN[name]
    ds = make()
    tf_ds = ds.to_tf()
    assert len(ds) == len(ds.to_torch()) == len(tf_ds) == int(tf_ds.cardinality()) == length
    assert counted(ds) == counted(ds.to_torch()) == counted(tf_ds) == length
    loader = DataLoader(ds.to_torch(), batch_size=None)
    assert len(loader) == counted(loader) == length


def test_an_endless_pipeline_has_no_len_and_an_infinite_cardinality():
    ds = records().batch(4).repeat()
    for endless in (ds, ds.to_torch()):
        with pytest.raises(UnknownLengthError, match=r"repeats forever \(repeat\(\)\)") as e:
            len(endless)
        assert isinstance(e.value, TypeError) and isinstance(e.value, TpufeedError)
        assert endless  # still truthy
    assert int(ds.to_tf().cardinality()) == tf.data.INFINITE_CARDINALITY


@pytest.mark.parametrize(
    "make,named",
    [
        (lambda: records().filter(lambda e: e["id"] % 2).batch(4), r"filter\(<lambda>\)"),
        (lambda: records().flat_map(lambda e: [e, e]).repeat(2), r"flat_map\(<lambda>\)"),
        (lambda: records().map(lambda e: {"t": np.arange(3)}).pack({"t": 4}), "pack"),
        (lambda: records().ignore_errors(2).batch(4), "ignore_errors"),
        (lambda: tpufeed.Dataset.mix([records(3), records(4)]).batch(2), "mix"),
    ],
)
def test_where_the_data_decides_the_count_len_says_which_stage_and_tf_does_not_know(make, named):
    ds = make()
    for unknown in (ds, ds.to_torch()):
        with pytest.raises(UnknownLengthError, match=f"{named}.*depend on the data"):
            len(unknown)
    assert int(ds.to_tf().cardinality()) == tf.data.UNKNOWN_CARDINALITY
