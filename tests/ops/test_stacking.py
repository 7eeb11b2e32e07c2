"""Stacking elements into batches, and cutting and joining batches."""

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
