"""Batches written into a shared-memory slot read back exactly as `stack` makes them."""

import numpy as np
import pytest

from tpufeed.errors import BatchError
from tpufeed.ops.stacking import stack
from tpufeed.run.workers.layout import read_batch, read_elements, write_elements, write_stacked

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
    """Equal trees: the same keys in the same order, types, dtypes, shapes and values."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b)
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
    with pytest.raises(
        BatchError, match=r"element 0 has shape \(3,\) but element 1 has shape \(4,\)"
    ):
        write_stacked(
            [np.zeros(3), np.zeros(4)], lambda n: calls.append(n), lambda i: f"element {i}"
        )
    assert calls == []


UNBATCHED = {
    "documents of any length": [{"tokens": np.arange(n, dtype=np.int32)} for n in (5, 0, 1, 900)],
    "arrays of any shape and dtype": [
        np.zeros((2, 3), np.float16),
        np.ones((7,), np.float16),
        np.full((), 3, np.float16),
    ],
    "pairs with a label": [(np.full((4, 4, 3), i, np.uint8), i) for i in range(3)],
    "str, bytes and objects ride along": [
        {
            "x": np.arange(i + 1),
            "name": f"r{i}",
            "raw": b"z",
            "obj": np.array([None]),
            "n": np.int64(i),
        }
        for i in range(3)
    ],
    "unaligned sizes": [
        {"b": np.arange(i, dtype=np.uint8), "d": np.arange(i, dtype=np.float64)} for i in (1, 3, 7)
    ],
}
NOT_UNSTACKED = {
    "no array at all": [{"i": 1}, {"i": 2}],
    "keys that differ": [{"x": np.zeros(1)}, {"y": np.zeros(1)}],
    "keys in another order": [{"x": np.zeros(1), "y": 1}, {"y": 1, "x": np.zeros(1)}],
    "a dict subclass": [__import__("collections").OrderedDict(x=np.zeros(2))],
    "a list element": [[np.zeros(2)]],
    "bare arrays of mixed dtypes": [np.zeros(2, np.int32), np.zeros(2, np.int64)],
    "an ndarray subclass": [np.ma.masked_array([1, 2])],
}


@pytest.mark.parametrize("name", sorted(UNBATCHED))
def test_unbatched_elements_come_back_equal_as_views_of_one_copy(name):
    elements = UNBATCHED[name]
    buffer, calls = bytearray(1 << 16), []
    layout = write_elements(elements, lambda n: calls.append(n) or memoryview(buffer))
    assert len(calls) == 1 and calls[0] % 64 == 0
    got = read_elements(layout, memoryview(buffer))
    buffer[:] = bytes(len(buffer))  # the slot is reused at once: what was read must not change
    assert len(got) == len(elements)
    bases = set()
    for a, b in zip(elements, got):
        assert type(a) is type(b)
        for x, y in (
            zip(a.values(), b.values())
            if isinstance(a, dict)
            else zip(a, b)
            if isinstance(a, tuple)
            else [(a, b)]
        ):
            assert type(x) is type(y)
            if isinstance(x, np.ndarray) and x.dtype != object:
                assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y)
                bases.add(id(y.base))
            else:
                assert x == y if not isinstance(x, np.ndarray) else x.tolist() == y.tolist()
        if isinstance(a, dict):
            assert list(a) == list(b)  # the keys' order too
    assert len(bases) == 1  # every array a view of the one copy


@pytest.mark.parametrize("name", sorted(NOT_UNSTACKED))
def test_elements_that_cannot_be_written_unstacked_take_no_slot(name):
    calls = []
    assert write_elements(NOT_UNSTACKED[name], calls.append) is None
    assert calls == []
