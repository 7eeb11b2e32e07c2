"""batch(pad=...): variable-length keys padded to a length or the smallest fitting bucket."""

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import BatchError, InvalidArgumentError


def seqs(n=40):
    return [
        {"t": np.arange(1, 1 + (i * 7) % 23, dtype=np.int32), "id": np.int64(i)} for i in range(n)
    ]


def check(batch, buckets):
    lengths = batch["t_lengths"]
    assert batch["t"].shape[1] == min(b for b in buckets if b >= lengths.max())
    for row, n in zip(batch["t"], lengths):
        assert row[:n].tolist() == list(range(1, n + 1)) and not row[n:].any()


def test_a_fixed_length_pads_every_batch_to_it():
    for batch in tpufeed.Dataset.from_sequence(seqs()).batch(8, pad={"t": 24}):
        assert batch["t"].shape == (8, 24) and batch["t_lengths"].dtype == np.int32
        check(batch, [24])


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("keep", [None, lambda e: e["id"] % 3 != 0])
def test_buckets_give_each_batch_the_smallest_length_that_fits(workers, keep):
    ds = tpufeed.Dataset.from_sequence(seqs()).shuffle(1)
    if keep is not None:
        ds = ds.filter(keep)
    ds = ds.batch(6, pad={"t": [8, 16, 24]})
    batches = list(ds.workers(workers))
    for batch in batches:
        check(batch, [8, 16, 24])
    assert len({b["t"].shape[1] for b in batches}) > 1
    assert [b["t"].tolist() for b in batches] == [b["t"].tolist() for b in ds]


def test_too_long_raises_naming_the_record_unless_cut():
    ds = tpufeed.Dataset.from_sequence(seqs()).batch(4, pad={"t": 10})
    with pytest.raises(BatchError, match=r"'t' of record \d+ has length \d+.*cut=True"):
        list(ds)
    cut = list(tpufeed.Dataset.from_sequence(seqs()).batch(4, pad={"t": 10}, cut=True))
    assert all(b["t"].shape == (4, 10) and b["t_lengths"].max() <= 10 for b in cut)


def test_bad_pad_settings_are_named():
    with pytest.raises(BatchError, match="has no key 'x'"):
        list(tpufeed.Dataset.from_sequence(seqs()).batch(4, pad={"x": 4}))
    for bad in ({}, {"t": 0}, {"t": []}, {"t": [4, "8"]}):
        with pytest.raises(InvalidArgumentError):
            tpufeed.Dataset.from_sequence(seqs()).batch(4, pad=bad)
    with pytest.raises(InvalidArgumentError, match="batch after pack takes no pad"):
        tpufeed.Dataset.from_sequence([]).pack({"t": 4}).batch(2, pad={"t": 4})
