"""`ChunkRunner`: a chunk that is one batch is stacked row by row as its last stage makes each
element, or, where the first element says the batch is small (`StackedRows.listed`), the rest of
that stage runs over the whole list and the batch is stacked in one call: the same batches,
statistics and errors either way."""

from __future__ import annotations

import numpy as np
import pytest

import tpufeed
import tpufeed.ops.rows as rows_module
from tpufeed.errors import TransformError


def _scaled(x):
    return {"x": np.asarray(x, np.float32) * 0.5, "label": int(x[0])}


def _pipeline(n=40):
    source = [np.full(6, i, np.int16) for i in range(n)]
    return tpufeed.Dataset.from_sequence(source).shuffle(3).map(_scaled).batch(8)


@pytest.fixture(params=["rows", "listed"])
def stacking(request, monkeypatch):
    monkeypatch.setattr(rows_module, "ROWS_FROM_BYTES", 0 if request.param == "rows" else 1 << 40)
    return request.param


def test_rows_and_lists_make_the_same_batches(stacking):
    got = list(_pipeline())
    assert len(got) == 5
    want = [np.sort(b["label"]) for b in got]
    assert sorted(np.concatenate(want).tolist()) == list(range(40))
    for batch in got:
        assert batch["x"].dtype == np.float32 and batch["x"].shape == (8, 6)
        assert np.array_equal(batch["x"][:, 0] * 2, batch["label"])


def test_both_ways_time_every_element_in_its_stage_and_the_batch(stacking):
    it = iter(_pipeline())
    list(it)
    stages = it.stats().stages
    assert stages["map(_scaled)"].records == 40 and stages["batch"].records == 40


def test_a_failing_element_after_the_first_is_named_either_way(stacking):
    def fails_on_7(x):
        if int(x[0]) == 7:
            raise ValueError("seven")
        return _scaled(x)

    source = [np.full(6, i, np.int16) for i in range(16)]
    ds = tpufeed.Dataset.from_sequence(source).map(fails_on_7).batch(8)
    with pytest.raises(
        TransformError, match=r"map\(fails_on_7\) raised ValueError: seven \(on record 7\)"
    ):
        list(ds)
