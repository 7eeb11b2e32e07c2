"""Stacking elements into batches, and cutting and joining batches."""

from collections import OrderedDict

import numpy as np
import pytest

from tpufeed.errors import BatchError
from tpufeed.ops.stacking import concat, stack, take


def test_concat_and_take_cut_batches():
    batch = stack([{"x": np.full(2, i)} for i in range(4)])
    joined = concat([batch, take(batch, 1, 3)])
    assert joined["x"][:, 0].tolist() == [0, 1, 2, 3, 1, 2]


class Crop:
    def __call__(self, image):
        return image


def decode(data):
    return data


@pytest.mark.parametrize(
    "value, says",
    [(Crop(), "a Crop object"), (Crop, "the class Crop"), (decode, "the function decode")],
)
@pytest.mark.parametrize(
    "elements, where",
    [
        (lambda v: [v, v, v], r"batch: element 0"),
        (lambda v: [{"x": v}, {"x": v}], r"batch at \['x'\]: element 0"),
        (lambda v: [(None, 1), (v, 2)], r"batch at \[0\]: element 1"),  # after a None
    ],
)
def test_a_batch_of_callables_is_refused_naming_the_element(value, says, elements, where):
    """A transform where its result was meant: batched, it would be an array of objects."""
    with pytest.raises(BatchError, match=rf"{where} is {says}, which is callable"):
        stack(elements(value))


def test_strings_bytes_and_other_objects_still_batch_into_object_arrays():
    out = stack([{"s": "a", "b": b"x", "o": None, "d": 1.5}, {"s": "b", "b": b"y", "o": 3, "d": 2}])
    assert out["s"].tolist() == ["a", "b"] and out["b"].tolist() == [b"x", b"y"]
    assert out["o"].dtype == object and out["o"].tolist() == [None, 3]


@pytest.mark.parametrize(
    "arrays",
    [
        [np.arange(6, dtype=np.uint8) + i for i in range(5)],  # W1's: 1-D
        [np.full((2, 3, 4), i, np.float32) for i in range(3)],
        [np.arange(8, dtype=np.int64)[::2] + i for i in range(3)],  # not contiguous
        [np.zeros((0, 3)) for _ in range(2)],  # no values
        [np.float32(i) * np.ones((), np.float32) for i in range(4)],  # scalars: np.stack itself
    ],
)
def test_arrays_of_one_shape_and_dtype_stack_as_numpy_stacks_them(arrays):
    for got in (stack(arrays), stack([{"x": a} for a in arrays])["x"]):
        want = np.stack(arrays)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got, want) and got.flags.c_contiguous and got.flags.writeable
        assert not np.shares_memory(got, arrays[0])


@pytest.mark.parametrize(
    "arrays, says",
    [
        ([np.zeros(3), np.zeros(3), np.zeros((3, 2))], r"element 2 has shape \(3, 2\)"),
        ([np.zeros((2, 2)), np.zeros((2, 3))], r"element 1 has shape \(2, 3\)"),
        ([np.zeros(4), np.zeros(2), np.zeros(6)], r"element 1 has shape \(2,\)"),  # sum fits
    ],
)
def test_arrays_of_other_shapes_still_fail_naming_the_element(arrays, says):
    with pytest.raises(BatchError, match=says):
        stack(arrays)


def test_arrays_of_other_dtypes_stack_to_what_numpy_makes_of_them():
    arrays = [np.ones(3, np.int8), np.ones(3, np.int32), np.full(3, 0.5, np.float32)]
    got = stack(arrays)
    assert got.dtype == np.stack(arrays).dtype and np.array_equal(got, np.stack(arrays))


@pytest.mark.parametrize(
    "arrays",
    [
        [np.full(3, 0.5, np.float32), np.ones(3, np.uint8)],  # promotes to the first's dtype
        [np.ones(3, np.uint8), [1, 2, 3]],  # a list among arrays
        [np.array([None, 1], object), np.array(["a", (1, 2)], object)],  # Python objects
        [np.ones((2, 2), np.int16), np.ones((2, 2), np.dtype(">i2"))],  # the other byte order
    ],
)
def test_arrays_with_other_values_among_them_stack_as_numpy_stacks_them(arrays):
    got, want = stack(arrays), np.stack(arrays)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert [np.asarray(row).tolist() for row in got] == [np.asarray(r).tolist() for r in want]


@pytest.mark.parametrize(
    "elements, says",
    [
        ([{"x": 1, "y": 2}, {"x": 1}], r"element 1 has \['x'\]"),  # fewer keys
        ([{"x": 1}, {"x": 1, "y": 2}], r"element 1 has \['x', 'y'\]"),  # more keys
        ([{"x": 1, "y": 2}, {"x": 1, "z": 2}], r"element 1 has \['x', 'z'\]"),  # as many, others
        ([{"x": 1}, {"x": 2}, ["x"]], "element 2 has list"),  # its keys, not a dict
        ([{"x": 1}, "x"], "element 1 has str"),
    ],
)
def test_dicts_of_other_keys_fail_naming_the_element(elements, says):
    with pytest.raises(BatchError, match=says):
        stack(elements)


def test_dicts_with_their_keys_in_any_order_or_of_a_dict_subclass_stack():
    elements = [{"x": 1, "y": 2.0}, {"y": 4.0, "x": 3}, OrderedDict(x=5, y=6.0)]
    out = stack(elements)
    assert list(out) == ["x", "y"] and out["x"].tolist() == [1, 3, 5]
    assert out["y"].tolist() == [2.0, 4.0, 6.0]
