"""`len(ds.to_torch())`: the batches one pass yields, where the record count decides them, the
same under DataLoader workers and on every host's share; a TypeError saying why elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

import tpufeed

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

N = 23


def records(n=N):
    return (
        tpufeed.Dataset.from_sequence(list(range(n))).shuffle(1).map(lambda r: {"id": np.int64(r)})
    )


def passed(loader):
    return sum(1 for _ in loader)


@pytest.mark.parametrize(
    "make",
    [
        lambda: records().batch(4),  # 6 batches, the last short
        lambda: records().batch(4, drop_remainder=True).repeat(3),
        lambda: records(),  # unbatched: one item per record
        lambda: records().repeat(0),
    ],
)
def test_the_length_is_the_batches_of_one_pass(make):
    ds = make()
    data = ds.to_torch()
    assert len(data) == len(ds) == passed(data)
    assert len(DataLoader(data, batch_size=None)) == len(data)


@pytest.mark.multiprocess
@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 3 workers on 2 cores
@pytest.mark.parametrize("workers", [2, 3])
@pytest.mark.parametrize("batch", [4, None])  # strided whole batches; shared-out records
def test_the_length_holds_under_dataloader_workers(workers, batch):
    ds = records().repeat(2)
    ds = ds.batch(batch) if batch else ds
    loader = DataLoader(ds.to_torch(), batch_size=None, num_workers=workers)
    assert len(loader) == len(ds) == passed(loader)


@pytest.mark.parametrize("hosts", [2, 3])
def test_each_hosts_length_is_its_own_share(hosts):
    """23 records: shares of 12 and 11, or 8, 8 and 7, so hosts differ by a batch of 4."""
    shares = [records().shard(h, hosts).batch(4, drop_remainder=True) for h in range(hosts)]
    lengths = [len(share.to_torch()) for share in shares]
    assert lengths == [passed(share.to_torch()) for share in shares]
    assert len(set(lengths)) == 2


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: records().batch(4).repeat(), r"repeats forever \(repeat\(\)\)"),
        (lambda: records().filter(lambda e: e["id"] % 2).batch(4), "depend on the data"),
        (lambda: tpufeed.Dataset.mix([records(3), records(4)]), "depend on the data"),
    ],
)
def test_an_unknown_length_is_a_type_error_saying_why(make, match):
    data = make().to_torch()
    with pytest.raises(TypeError, match=match):
        len(data)
    assert data  # still truthy: a description of a pass, like the Dataset
