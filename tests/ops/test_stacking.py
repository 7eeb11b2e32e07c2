"""Stacking elements into batches, and cutting and joining batches."""

import numpy as np

from tpufeed.ops.stacking import concat, stack, take


def test_concat_and_take_cut_batches():
    batch = stack([{"x": np.full(2, i)} for i in range(4)])
    joined = concat([batch, take(batch, 1, 3)])
    assert joined["x"][:, 0].tolist() == [0, 1, 2, 3, 1, 2]
