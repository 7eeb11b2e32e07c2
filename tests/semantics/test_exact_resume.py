"""DESIGN.md semantics 4, exact resume: an iterator rebuilt from `get_state()` yields exactly what
the original would have yielded next, at any step, across epochs; the state stays small and
versioned, and a state that does not fit the dataset is refused. Every stage and combination,
restored at every step: test_restore_every_step.py."""

import json

import numpy as np
import pytest

import tpufeed
from tests.semantics.numbered import N, make, noisy
from tests.semantics.restore import assert_equal_output_after_checkpoint
from tpufeed.errors import StateError


@pytest.mark.parametrize("batch,drop", [(None, False), (4, False), (5, True)])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_resume_at_every_step_across_epochs(batch, drop, prefetch):
    ds = make(n=23, batch=batch, drop=drop, epochs=3, extra=noisy, prefetch=prefetch)
    assert len(assert_equal_output_after_checkpoint(ds)) > 6


def test_resume_with_a_filter_continues_after_the_last_batch():
    ds = make(n=50, batch=4, epochs=2, extra=lambda ds: ds.filter(lambda e: e["record"] % 3 != 0))
    full = list(ds.iterator())
    it = ds.iterator()
    for step in range(len(full)):
        assert _same(list(ds.iterator(it.get_state())), full[step:])
        next(it)


def _same(a, b):
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.keys() != y.keys() or not all(np.array_equal(x[k], y[k]) for k in x):
            return False
    return True


def test_state_is_small_versioned_json():
    it = make(n=10**6, batch=256, epochs=None).iterator()
    next(it)
    state = it.get_state()
    assert state["version"] == 3 and "fingerprint" in state
    assert len(json.dumps(state)) < 1024


def test_a_version_1_state_still_resumes():
    ds = make(batch=4, epochs=2)
    it = ds.iterator()
    next(it)
    state = {**it.get_state(), "version": 1}
    assert _same(list(ds.iterator(state)), list(it))


def test_state_from_another_dataset_is_rejected():
    state = make().iterator().get_state()
    for other in [
        make(seed=8),
        make(n=N + 1),
        make(batch=4),
        tpufeed.Dataset.from_sequence(list(range(N))),
    ]:
        with pytest.raises(StateError, match="another dataset"):
            other.iterator(state)


@pytest.mark.parametrize(
    "bad",
    [
        "not json",
        [],
        {"version": 99},
        {"version": 1},
    ],
)
def test_malformed_state_is_rejected(bad):
    with pytest.raises(StateError):
        make().iterator(bad)


def test_state_with_bad_fields_is_rejected():
    state = make().iterator().get_state()
    for key, value in [("epoch", -1), ("hosts", 0), ("host", 5), ("consumed", "3")]:
        with pytest.raises(StateError, match=key if key != "host" else "host"):
            make().iterator({**state, key: value})


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("consumed", 38, "37 in an epoch"),
        ("base", 40, "past the 37 positions"),
        ("epoch", 2, "runs 2 epoch"),
        ("carries", [[37, 0]], "past the 37 records"),
        ("layers", [[0, 2, 0, [20, 0]]], "does not fit this dataset"),
    ],
)
def test_a_state_whose_numbers_do_not_fit_the_dataset_is_refused(field, value, match):
    ds = make(epochs=2)
    state = {**ds.iterator().get_state(), field: value}
    with pytest.raises(StateError, match=match):
        ds.iterator(state)
