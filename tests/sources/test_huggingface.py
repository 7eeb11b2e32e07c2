"""Hugging Face `datasets.Dataset`s built locally (nothing from a hub): through `from_source` as
they are (batched `__getitems__` used), and through `from_huggingface`, typed like Parquet rows;
shuffle, batch, exact and elastic resume, workers, a dataset on disk, and errors."""

from __future__ import annotations

import json

import datasets  # tpufeed[huggingface]
import numpy as np
import pytest

import tpufeed
from tpufeed.errors import InvalidArgumentError, RecordIndexError

N = 60


def build(n: int = N):
    return datasets.Dataset.from_dict(
        {
            "id": list(range(n)),
            "text": [None if i % 7 == 0 else f"doc {i}" for i in range(n)],
            "count": [None if i % 5 == 0 else i for i in range(n)],
            "tokens": [list(range(i % 4)) for i in range(n)],
        }
    )


def ids(ds) -> list[list[int]]:
    return [b.tolist() for b in ds]


@pytest.fixture(params=["from_source", "from_huggingface"])
def make(request):
    constructor = getattr(tpufeed.Dataset, request.param)
    return lambda hf, **kw: constructor(hf, **kw)


def test_from_source_reads_through_getitems(monkeypatch):
    hf = build()
    calls = []
    batched = hf.__getitems__
    monkeypatch.setattr(
        hf, "__getitems__", lambda keys: calls.append(len(keys)) or batched(keys), raising=False
    )
    got = list(tpufeed.Dataset.from_source(hf).map(lambda e: e["id"]).batch(16))
    assert calls == [16, 16, 16, 12]  # one batched read per chunk, no per-row __getitem__
    assert got[0].tolist() == list(range(16))
    assert tpufeed.Dataset.from_source(hf).source[8] == {
        "id": 8,
        "text": "doc 8",
        "count": 8,
        "tokens": [],
    }


def test_shuffle_batch_and_exact_resume(make):
    ds = make(build()).shuffle(3).map(lambda e: e["id"]).batch(8).repeat(2)
    full = ids(ds)
    assert sorted(sum(full[: len(full) // 2], [])) == list(range(N))
    it = ds.iterator()
    for step in range(len(full)):
        state = json.loads(json.dumps(it.get_state()))
        assert ids(ds.iterator(state)) == full[step:]
        next(it)


def test_elastic_resume_from_every_hosts_state(make):
    def host(h, hosts):
        return make(build()).shuffle(4).shard(h, hosts).map(lambda e: e["id"]).batch(5)

    seen, states = [], []
    for h in range(3):
        it = host(h, 3).iterator()
        for _ in range(h + 1):
            seen += next(it).tolist()
        states.append(it.get_state())
    for h in range(2):
        seen += [i for b in host(h, 2).iterator(states) for i in b.tolist()]
    assert sorted(seen) == list(range(N))


@pytest.mark.parametrize("on_disk", [False, True])
def test_workers_get_the_dataset_pickled(make, tmp_path, on_disk):
    hf = build()
    if on_disk:  # memory-mapped Arrow files, as load_dataset and load_from_disk give
        hf.save_to_disk(str(tmp_path / "hf"))
        hf = datasets.load_from_disk(str(tmp_path / "hf"))
    ds = make(hf).shuffle(5).map(lambda e: {"id": e["id"], "n": len(e["tokens"])}).batch(8)
    alone = [b["id"].tolist() for b in ds]
    assert [b["id"].tolist() for b in ds.workers(2)] == alone


def test_from_huggingface_types_rows_like_parquet(tmp_path):
    hf = build()
    source = tpufeed.Dataset.from_huggingface(hf).source
    row = source[10]
    assert row["id"] == 10 and type(row["id"]) is np.int64
    assert source[5]["count"] is None and type(source[6]["count"]) is np.int64  # no float NaN
    assert source[0]["text"] is None and source[8]["text"] == "doc 8"
    assert isinstance(source[3]["tokens"], np.ndarray) and source[3]["tokens"].tolist() == [0, 1, 2]
    batch = next(
        iter(
            tpufeed.Dataset.from_huggingface(hf, columns=["count", "id"])
            .filter(lambda e: e["count"] is not None)
            .batch(4)
        )
    )
    assert list(batch) == ["count", "id"] and batch["count"].dtype == np.int64
    hf.to_parquet(str(tmp_path / "same.parquet"))
    parquet = tpufeed.Dataset.from_parquet(str(tmp_path / "same.parquet")).source
    for i in (0, 5, 13, 59):
        a, b = source[i], parquet[i]
        assert a.keys() == b.keys()
        assert all(
            np.array_equal(a[k], b[k]) if isinstance(a[k], np.ndarray) else a[k] == b[k] for k in a
        )


def test_from_huggingface_errors():
    hf = build()
    with pytest.raises(InvalidArgumentError, match=r"no column 'nope'; its columns are"):
        tpufeed.Dataset.from_huggingface(hf, columns=["id", "nope"])
    with pytest.raises(InvalidArgumentError, match=r"one split.*\['test', 'train'\]"):
        tpufeed.Dataset.from_huggingface(datasets.DatasetDict({"train": hf, "test": hf}))
    with pytest.raises(InvalidArgumentError, match=r"datasets.Dataset \(to_iterable_dataset"):
        tpufeed.Dataset.from_huggingface(hf.to_iterable_dataset())
    with pytest.raises(RecordIndexError, match="out of range"):
        tpufeed.Dataset.from_huggingface(hf).source[N]
    with pytest.raises(InvalidArgumentError, match=r"cache_bytes=0 apply to the files under a"):
        tpufeed.Dataset.from_huggingface(hf, cache_bytes=0)
    with pytest.raises(InvalidArgumentError, match=r"one split, got a IterableDatasetDict"):
        tpufeed.Dataset.from_huggingface(
            datasets.IterableDatasetDict({"train": hf.to_iterable_dataset()})
        )
