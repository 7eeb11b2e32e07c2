"""`Dataset.element_spec` (issue 29): what each item is, learnt from the first record, with the
dimensions the stages fix, and true of every item a run then makes."""

from __future__ import annotations

import logging
from collections import namedtuple

import numpy as np
import pytest

import tpufeed
from tests.dataset_folder import make_dataset
from tpufeed import TensorSpec
from tpufeed.errors import InvalidArgumentError
from tpufeed.run.element_spec import BYTES, STR, spec_of

Pair = namedtuple("Pair", "image label")


def record(i: int) -> dict:
    return {"x": np.full((2, 3), i, np.float32), "name": f"r{i}", "raw": b"b" * (i % 3), "i": i}


def tokens(i: int) -> dict:
    return {"t": np.arange(1 + i % 7, dtype=np.int32)}


SOURCE = tpufeed.Dataset.from_sequence(list(range(21))).shuffle(3)
PIPELINES = {
    "records": SOURCE,
    "dicts": SOURCE.map(record),
    "batch": SOURCE.map(record).batch(4),
    "batch, drop": SOURCE.map(record).batch(4, drop_remainder=True),
    "map after batch": SOURCE.map(record).batch(4, drop_remainder=True).map(lambda b: b["x"]),
    "tuples": SOURCE.map(lambda i: (np.zeros(2), [i, "a"])).batch(5),
    "namedtuples": SOURCE.map(lambda i: Pair(np.zeros((2, 2), np.uint8), i)).batch(3),
    "pad buckets": SOURCE.map(tokens).batch(4, pad={"t": [4, 8]}),
    "pad one length": SOURCE.map(tokens).batch(4, drop_remainder=True, pad={"t": 8}),
    "pack": SOURCE.map(tokens).pack({"t": 8}),
    "pack, batch": SOURCE.map(tokens).pack({"t": 8}).batch(3),
    "filter, flat_map": SOURCE.filter(lambda i: i > 4).flat_map(lambda i: [i] * (i % 3)).batch(2),
    "random_map": SOURCE.random_map(lambda i, rng: rng.normal(size=3)).batch(2),
    "mix": tpufeed.Dataset.mix([SOURCE.map(record), SOURCE.map(record)], on_end="stop").batch(4),
}


def fits(spec, item) -> bool:
    """Whether `item` has the structure, the dtypes and the known dimensions of `spec`."""
    got = spec_of(item)
    flat_spec, flat_got = [], []
    if not _same_structure(spec, got, flat_spec, flat_got):
        return False
    return all(
        s.dtype == g.dtype
        and len(s.shape) == len(g.shape)
        and all(d is None or d == e for d, e in zip(s.shape, g.shape))
        for s, g in zip(flat_spec, flat_got)
    )


def _same_structure(a, b, flat_a, flat_b) -> bool:
    if isinstance(a, TensorSpec) or isinstance(b, TensorSpec):
        flat_a.append(a), flat_b.append(b)
        return isinstance(a, TensorSpec) and isinstance(b, TensorSpec)
    if type(a) is not type(b) or len(a) != len(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_structure(a[k], b[k], flat_a, flat_b) for k in a)
    return all(_same_structure(x, y, flat_a, flat_b) for x, y in zip(a, b))


@pytest.mark.parametrize("name", list(PIPELINES))
def test_the_spec_holds_for_every_item_of_a_run(name):
    ds = PIPELINES[name]
    spec = ds.element_spec
    items = list(ds)
    assert items and all(fits(spec, item) for item in items), (spec, spec_of(items[-1]))


def test_the_stages_fix_the_dimensions_they_know():
    assert PIPELINES["records"].element_spec == TensorSpec((), np.int64, sampled=True)
    dicts = PIPELINES["dicts"].element_spec
    assert dicts["name"] == TensorSpec((), STR, True) and dicts["raw"].dtype == BYTES
    assert PIPELINES["batch"].element_spec["x"].shape == (None, 2, 3)  # a short last batch
    assert PIPELINES["batch, drop"].element_spec["x"].shape == (4, 2, 3)
    assert PIPELINES["map after batch"].element_spec == TensorSpec((4, 2, 3), np.float32, True)
    assert PIPELINES["tuples"].element_spec[1][1] == TensorSpec((None,), STR, True)
    assert type(PIPELINES["namedtuples"].element_spec) is Pair
    assert PIPELINES["pad buckets"].element_spec == {
        "t": TensorSpec((None, None), np.int32, True),
        "t_lengths": TensorSpec((None,), np.int32),
    }
    assert PIPELINES["pad one length"].element_spec["t"].shape == (4, 8)
    packed = TensorSpec((3, 8), np.int32)  # every packed batch is full: known, not sampled
    assert PIPELINES["pack, batch"].element_spec == {
        "t": packed,
        "t_segment_ids": packed,
        "t_positions": packed,
    }
    assert PIPELINES["pack"].element_spec["t_positions"] == TensorSpec((8,), np.int32)
    assert repr(TensorSpec((None, 3), np.float32)) == "TensorSpec(shape=(None, 3), dtype=float32)"


class CountedSource:
    """A source (the Grain protocol) that counts the records read from it."""

    def __init__(self, records):
        self.records, self.reads = records, 0

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        self.reads += 1
        return self.records[i]


def test_one_record_is_read_and_the_functions_run_once_on_it(caplog):
    source = CountedSource([tpufeed.codec.encode(record(i)) for i in range(50)])
    calls = []

    def decode(data):
        calls.append("decode")
        return tpufeed.codec.decode(data)

    def pair(batch):
        calls.append("pair")
        return batch["x"], batch["i"]

    ds = tpufeed.Dataset.from_source(source).shuffle(0).map(decode).batch(8).map(pair)
    with caplog.at_level(logging.INFO, logger="tpufeed"):
        spec = ds.element_spec
    assert source.reads == 1 and calls == ["decode", "pair"]
    assert "element_spec runs map(decode), map(pair) on one element" in caplog.text
    assert spec == (TensorSpec((None, 2, 3), np.float32, True), TensorSpec((None,), np.int64, True))

    source.reads = 0
    dropped = tpufeed.Dataset.from_source(source).filter(lambda r: calls.append("filter")).batch(4)
    assert dropped.element_spec == TensorSpec((None,), BYTES, True)
    assert source.reads == 1 and "filter" not in calls  # a filter changes no element


def test_records_a_filter_drops_are_passed_over_a_few_at_a_time():
    source = CountedSource(list(range(100)))
    ds = tpufeed.Dataset.from_source(source).filter(lambda i: i >= 5).map(lambda i: {"i": i})
    assert ds.element_spec == {"i": TensorSpec((), np.int64, True)}
    assert source.reads == 7  # 1, 2, 4 records: the first element is record 5
    nothing = tpufeed.Dataset.from_sequence(list(range(9))).flat_map(lambda i: []).batch(2)
    with pytest.raises(InvalidArgumentError, match="no record of the source's 9 makes an item"):
        _ = nothing.element_spec


def test_a_manifest_schema_gives_the_dimensions_that_vary(tmp_path):
    rows = [
        {"t": np.arange(1 + i % 4, dtype=np.int64), "x": np.zeros(3, np.float32)} for i in range(8)
    ]
    make_dataset(tmp_path / "data", [rows[:4], rows[4:]])
    ds = tpufeed.Dataset.open(tmp_path / "data")
    assert ds.element_spec == {
        "t": TensorSpec((None,), np.int64),
        "x": TensorSpec((3,), np.float32),
    }
    padded = ds.batch(2, pad={"t": [2, 4]}, drop_remainder=True).element_spec
    assert padded["t"] == TensorSpec((2, None), np.int64) and padded["x"].shape == (2, 3)
    mapped = ds.map(lambda e: {"t": e["t"]}).element_spec  # a function may change any shape
    assert mapped["t"] == TensorSpec((1,), np.int64, True)
