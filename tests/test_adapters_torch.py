"""`to_torch` (issue 5 item 2): tensors, resumable state, and no duplicates under DataLoader workers."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import tpufeed
from tpufeed.errors import StateError

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader  # noqa: E402

N = 45


def to_element(r):
    return {"id": np.int64(r), "x": np.full((3,), r, np.float32), "flag": r % 2 == 0, "name": f"r{r}"}


def make(n=N, batch=4, epochs=1, host=0, hosts=1):
    ds = tpufeed.Dataset.from_sequence(list(range(n))).shuffle(2).shard(host, hosts)
    return ds.map(to_element).batch(batch).repeat(epochs)


def ids(batches):
    return [i for b in batches for i in b["id"].tolist()]


def test_batches_are_tensors_with_the_pipelines_values():
    expected = list(make())
    got = list(make().to_torch())
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert a["id"].dtype == torch.int64 and a["x"].dtype == torch.float32
        assert a["flag"].dtype == torch.bool
        assert a["id"].tolist() == b["id"].tolist()
        assert torch.equal(a["x"], torch.from_numpy(b["x"]))
        assert a["name"] == b["name"].tolist()  # str leaves become lists, as in torch's collate


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("hosts", [1, 2])
@pytest.mark.parametrize("num_workers", [0, 1, 3])
def test_dataloader_workers_take_disjoint_shares(hosts, num_workers):
    epochs = 2
    delivered: list[int] = []
    for host in range(hosts):
        loader = DataLoader(make(epochs=epochs, host=host, hosts=hosts).to_torch(), batch_size=None,
                            num_workers=num_workers)
        delivered += ids(loader)
    assert sorted(delivered) == sorted(list(range(N)) * epochs)


@pytest.mark.parametrize("stop", [0, 1, 5, 12, 17])  # 12 batches an epoch
def test_state_dict_resumes_exactly_across_epochs(stop):
    ds = make(epochs=2)
    expected = ids(ds)
    torch_ds = ds.to_torch()
    it = iter(DataLoader(torch_ds, batch_size=None))
    head = ids(next(it) for _ in range(stop))
    state = json.loads(json.dumps(torch_ds.state_dict()))
    resumed = ds.to_torch()
    resumed.load_state_dict(state)
    assert head + ids(DataLoader(resumed, batch_size=None)) == expected
    assert ids(resumed) == expected  # a later pass starts from the beginning again


def test_load_state_dict_rejects_a_foreign_state():
    state = make(n=10).to_torch().state_dict()
    with pytest.raises(StateError):
        make().to_torch().load_state_dict(state)
    with pytest.raises(StateError):
        make().to_torch().load_state_dict("not a dict")


def test_pin_memory_without_an_accelerator_warns_and_still_yields():
    if torch.accelerator.is_available():
        batch = next(iter(make().to_torch(pin_memory=True)))
        assert batch["x"].is_pinned()
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batch = next(iter(make().to_torch(pin_memory=True)))
    assert any("no accelerator" in str(w.message) for w in caught)
    assert batch["x"].tolist() == next(iter(make()))["x"].tolist()


def test_wait_fraction_of_the_pass():
    torch_ds = make().to_torch()
    assert torch_ds.wait_fraction == 0.0
    for _ in torch_ds:
        pass
    assert 0.0 < torch_ds.wait_fraction <= 1.0
