"""Batches written into a shared-memory slot read back exactly as `stack` makes them."""

import numpy as np
import pytest

from tpufeed.batching import concat, stack, take
from tpufeed.errors import BatchError
from tpufeed.workers.layout import read_batch, write_stacked

CASES = {
    "flat dict": [{"x": np.full(3, i, np.uint8), "y": np.float32(i)} for i in range(5)],
    "bare arrays": [np.arange(4) * i for i in range(6)],
    "python scalars": [{"i": i, "f": i / 2, "b": bool(i % 2)} for i in range(4)],
    "nested": [{"a": (np.zeros(2) + i, [1, 2]), "b": {"c": np.int64(i)}} for i in range(3)],
    "strings": [{"s": f"r{i}", "raw": bytes([i])} for i in range(3)],
    "mixed dtypes upcast": [np.array([1], np.int32), np.array([2], np.int64)],
    "zero-size": [{"e": np.zeros((0, 3))} for _ in range(2)],
}


def write(elements):
    calls = []
    buffer = bytearray(1 << 16)

    def buffer_for(nbytes):
        calls.append(nbytes)
        assert nbytes <= len(buffer)
        return memoryview(buffer)

    layout = write_stacked(elements, buffer_for, lambda i: f"element {i}")
    return layout, buffer, calls


def assert_same(a, b):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    else:
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


@pytest.mark.parametrize("name", sorted(CASES))
def test_slot_batches_equal_stacked_batches_and_take_one_slot(name):
    elements = CASES[name]
    layout, buffer, calls = write(elements)
    assert len(calls) == 1  # a second call would leak the first slot
    assert_same(read_batch(layout, memoryview(buffer)), stack(elements))


def test_mismatched_shapes_raise_before_a_slot_is_taken():
    calls = []
    with pytest.raises(BatchError, match=r"element 0 has shape \(3,\) but element 1 has shape \(4,\)"):
        write_stacked([np.zeros(3), np.zeros(4)], lambda n: calls.append(n), lambda i: f"element {i}")
    assert calls == []


def test_concat_and_take_cut_batches():
    batch = stack([{"x": np.full(2, i)} for i in range(4)])
    joined = concat([batch, take(batch, 1, 3)])
    assert joined["x"][:, 0].tolist() == [0, 1, 2, 3, 1, 2]
