"""Grain's restore-at-every-step check, for tpufeed pipelines.

Grain's `grain._src.python.testing.experimental.assert_equal_output_after_checkpoint` takes an
iterator's state before every element, restores each into a fresh iterator and checks that the
rest of the output is what followed. Here the expected output is a straight run (an iterator
nobody asked for a state), so the check also catches a `get_state()` that disturbs the
iterator it is called on; the last state (after the last item) must restore into nothing.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

import tpufeed

# DESIGN.md semantics 4: "the state stays small (a few hundred bytes, no buffered data)".
MAX_STATE_BYTES = 1024


def plain(item: Any) -> Any:
    """An item as comparable Python values: arrays keep their dtype and shape."""
    if isinstance(item, dict):
        return {key: plain(value) for key, value in item.items()}
    if isinstance(item, (list, tuple)):
        return [plain(value) for value in item]
    if isinstance(item, (np.ndarray, np.generic)):
        return (str(item.dtype), item.shape, item.tolist())
    return item


def restored(ds: tpufeed.Dataset, state: dict, step: int) -> tpufeed.DatasetIterator:
    """A fresh iterator at `state`: `ds.iterator(state)` at even steps, `set_state` on a new
    iterator at odd ones, so both ways in are checked."""
    if step % 2 == 0:
        return ds.iterator(state)
    it = ds.iterator()
    it.set_state(state)
    return it


def assert_equal_output_after_checkpoint(ds: tpufeed.Dataset) -> list:
    """Restores a state taken before every item (and after the last) into a fresh iterator and
    checks that it gives the rest of a straight run, item for item; returns that run.

    Each state goes through JSON and stays under MAX_STATE_BYTES; a restored iterator's state,
    before it has given anything, is the state it was given.
    """
    with ds.iterator() as straight_run:
        straight = [plain(item) for item in straight_run]
    assert straight, "the pipeline made nothing: nothing to check"
    states = []
    with ds.iterator() as it:
        for step in range(len(straight) + 1):
            text = json.dumps(it.get_state())
            assert len(text) < MAX_STATE_BYTES, f"a state of {len(text)} bytes at step {step}"
            states.append(json.loads(text))
            if step < len(straight):
                assert plain(next(it)) == straight[step], f"get_state() changed item {step}"
        assert next(it, None) is None, "more items than a straight run"
    for step, state in enumerate(states):
        with restored(ds, state, step) as it:
            again = json.loads(json.dumps(it.get_state()))
            assert again == state, f"the state restored at step {step} reads back changed"
            rest = [plain(item) for item in it]
        assert rest == straight[step:], (
            f"restored at step {step} of {len(straight)}: {len(rest)} items follow, "
            f"{len(straight) - step} expected; first difference at item "
            f"{next((i for i, (a, b) in enumerate(zip(rest, straight[step:])) if a != b), None)}"
        )
    return straight
