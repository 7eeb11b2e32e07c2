"""Grain's own `assert_equal_output_after_checkpoint` over `to_torch()`: it iterates a pass,
takes the state before every batch, and restores each into a new iterator of the same
IterableDataset (a new pass, set back by `set_state`), which must give the rest of the pass.
Over one epoch and several, whole batches and a filter's, and a later pass (set_epoch)."""

from __future__ import annotations

import numpy as np
import pytest

import tpufeed

torch = pytest.importorskip("torch")
grain_testing = pytest.importorskip("grain._src.python.testing.experimental")


class AsNumpy:
    """The batches of `data` with numpy leaves: Grain compares with `np.testing.assert_equal`,
    which cannot compare torch tensors. Its iterators are `data`'s, state and all."""

    def __init__(self, data):
        self.data = data

    def __iter__(self):
        return NumpyBatches(iter(self.data))


class NumpyBatches:
    def __init__(self, it):
        self.it = it

    def __iter__(self):
        return self

    def __next__(self):
        return {key: value.numpy() for key, value in next(self.it).items()}

    def get_state(self):
        return self.it.get_state()

    def set_state(self, state):
        self.it.set_state(state)


def make(epochs, keep_all=True):
    ds = tpufeed.Dataset.from_sequence(list(range(14))).shuffle(3)
    ds = ds.map(lambda r: {"id": np.int64(r), "x": np.full(2, r, np.float32)})
    return (ds if keep_all else ds.filter(lambda e: e["id"] % 3 != 0)).batch(4).repeat(epochs)


@pytest.mark.parametrize("epochs", [1, 2])
@pytest.mark.parametrize("keep_all", [True, False])
def test_grains_checkpoint_check_passes_over_to_torch(epochs, keep_all):
    data = make(epochs, keep_all).to_torch()
    grain_testing.assert_equal_output_after_checkpoint(AsNumpy(data))


def test_grains_checkpoint_check_passes_in_a_later_pass():
    data = make(2).to_torch()
    data.set_epoch(3)  # epochs 6 and 7; the iterators Grain makes next are later passes
    grain_testing.assert_equal_output_after_checkpoint(AsNumpy(data))
    it = iter(data)
    it.set_state(make(2).to_torch().get_state())  # back to pass 0, two epochs only
    assert len(list(it)) == len(data) == 8
