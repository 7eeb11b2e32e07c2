"""`StackedRows`: a batch stacked one element at a time gives what `stack` gives for the whole
list (values, dtypes, errors), in a slot or in memory, whatever the elements are."""

from __future__ import annotations

import numpy as np
import pytest

from tests.run.workers.test_layout import assert_same
from tpufeed.errors import BatchError
from tpufeed.ops.rows import StackedRows
from tpufeed.ops.stacking import stack
from tpufeed.run.workers.layout import read_batch


def _describe(i: int) -> str:
    return f"record {i}"


class _Slot:
    """A slot as a worker's `buffer_for` gives it, counting the calls."""

    def __init__(self) -> None:
        self.calls, self.buffer = 0, None

    def __call__(self, nbytes: int) -> memoryview:
        self.calls += 1
        self.buffer = np.empty(nbytes, np.uint8)
        return memoryview(self.buffer)


def _both(elements: list, rows: int | None = None) -> tuple:
    """The batch through a slot (its layout read back) and in memory; asserts one slot."""
    rows = len(elements) if rows is None else rows
    slot = _Slot()
    in_slot = StackedRows(rows, slot, _describe)
    in_memory = StackedRows.in_memory(rows, _describe)
    for element in elements:
        in_slot.add(element)
        in_memory.add(element)
    assert slot.calls == 1 and in_slot.count == in_memory.count == len(elements)
    layout = in_slot.result()
    return read_batch(layout, slot.buffer), in_memory.result(), layout


def _elements(n: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [
        {
            "image": rng.random((4, 5, 3)).astype(np.float32),
            "label": int(rng.integers(10)),
            "name": f"n{i}",
            "pair": (rng.integers(0, 9, 2, dtype=np.int16), np.float64(i)),
            "scalar": np.array(i, np.int64),
        }
        for i in range(n)
    ]


@pytest.mark.parametrize("n", [1, 2, 7])
def test_rows_give_what_stack_gives(n):
    elements = _elements(n)
    from_slot, in_memory, layout = _both(elements)
    want = stack(elements)
    assert_same(from_slot, want)
    assert_same(in_memory, want)
    kinds = {key: spec[0] for key, spec in zip(["image", "label", "name"], layout[1])}
    assert kinds["image"] == "<f4" and kinds["label"] == "inline" and kinds["name"] == "inline"


def test_flat_dicts_with_keys_in_another_order_stack_by_key():
    a = {"x": np.zeros(2, np.float32), "y": np.ones(3, np.int32)}
    b = {"y": np.full(3, 7, np.int32), "x": np.full(2, 5, np.float32)}
    from_slot, in_memory, _ = _both([a, b])
    assert_same(from_slot, stack([a, b]))
    assert_same(in_memory, stack([a, b]))


def test_fewer_elements_than_rows_make_a_shorter_batch():
    elements = _elements(3)
    from_slot, in_memory, _ = _both(elements, rows=8)  # 5 dropped on the way
    assert_same(from_slot, stack(elements))
    assert_same(in_memory, stack(elements))


def test_more_elements_than_rows_still_make_the_whole_batch():
    elements = _elements(5)
    from_slot, in_memory, _ = _both(elements, rows=3)
    assert_same(from_slot, stack(elements))
    assert_same(in_memory, stack(elements))


def test_an_element_of_another_dtype_turns_the_batch_into_a_list_stacked_at_the_end():
    """float32 rows, then a float64 element: numpy's stack makes float64, twice the bytes the
    slot was taken for, so the batch travels in the layout."""
    elements = [{"x": np.full(4, i, np.float32)} for i in range(3)]
    elements.append({"x": np.full(4, 0.1, np.float64)})
    from_slot, in_memory, layout = _both(elements)
    want = stack(elements)
    assert want["x"].dtype == np.float64
    assert_same(from_slot, want)
    assert_same(in_memory, want)
    assert layout[1][0][0] == "inline"
    # narrower: int8 after int32 fits the slot taken for int32 rows
    narrow = [{"x": np.full(4, i, np.int32)} for i in range(3)] + [{"x": np.ones(4, np.int8)}]
    from_slot, _, layout = _both(narrow)
    assert_same(from_slot, stack(narrow))
    assert layout[1][0][0] != "inline"


@pytest.mark.parametrize(
    "bad",
    [
        {"image": np.zeros((2, 2)), "label": 1},  # another shape
        {"image": np.zeros((4, 5, 3), np.float32)},  # another set of keys
        [np.zeros(3)],  # another structure
    ],
)
def test_an_element_that_cannot_be_stacked_fails_as_stack_does(bad):
    elements = [{"image": np.zeros((4, 5, 3), np.float32), "label": i} for i in range(3)]
    elements.insert(2, bad)
    with pytest.raises(BatchError) as expected:
        stack(elements, _describe)
    for rows in (StackedRows(4, _Slot(), _describe), StackedRows.in_memory(4, _describe)):
        for element in elements:
            rows.add(element)
        with pytest.raises(BatchError) as got:
            rows.result()
        assert str(got.value) == str(expected.value)


def test_bare_arrays_and_tuples_are_rows_too():
    arrays = [np.arange(6, dtype=np.uint8).reshape(2, 3) + i for i in range(4)]
    from_slot, in_memory, _ = _both(arrays)
    assert_same(from_slot, stack(arrays))
    assert_same(in_memory, stack(arrays))
    pairs = [(np.full(2, i, np.float32), np.int32(i)) for i in range(4)]
    from_slot, in_memory, _ = _both(pairs)
    assert_same(from_slot, stack(pairs))
    assert_same(in_memory, stack(pairs))


def test_no_element_is_no_batch():
    slot = _Slot()
    assert StackedRows(4, slot, _describe).result() is None
    assert StackedRows.in_memory(4, _describe).result() is None
    assert slot.calls == 0


def _written_in_place(rows: StackedRows, value: float, **other) -> dict:
    """The next element, its "x" written straight into the row `rows.row` hands out."""
    place = rows.row("x", (2, 3), np.float32)
    assert place is not None
    place[...] = value
    return {"x": place, **other}


@pytest.mark.parametrize("where", ["slot", "memory"])
def test_a_row_written_in_place_is_the_batch_row(where):
    slot = _Slot()
    rows = (
        StackedRows(3, slot, _describe) if where == "slot" else StackedRows.in_memory(3, _describe)
    )
    assert rows.row("x", (2, 3), np.float32) is None  # no layout before the first element
    rows.add({"x": np.zeros((2, 3), np.float32), "y": 0})
    assert rows.row("x", (2, 4), np.float32) is None  # another shape
    assert rows.row("x", (2, 3), np.float64) is None  # another dtype
    assert rows.row("y", (), np.int64) is None  # not an array in the rows
    assert rows.row("z", (2, 3), np.float32) is None  # not a key of the batch
    rows.add(_written_in_place(rows, 1.0, y=1))
    rows.add(_written_in_place(rows, 2.0, y=2))
    assert rows.row("x", (2, 3), np.float32) is None  # past the last row
    batch = rows.batch() if where == "memory" else read_batch(rows.layout(), slot.buffer)
    expected = {
        "x": np.stack([np.full((2, 3), v, np.float32) for v in (0, 1, 2)]),
        "y": np.arange(3),
    }
    assert_same(batch, expected)


def test_a_row_written_in_place_but_put_elsewhere_is_copied_before_it_is_written_over():
    """A stage that writes the row of "x" but returns it as "w" (and other pixels as "x"): the
    batch is what `stack` makes of the elements, never the row written over."""
    first = {"x": np.zeros((2, 3), np.float32), "w": np.zeros((2, 3), np.float32)}
    rows = StackedRows.in_memory(3, _describe)
    rows.add(first)
    second = _written_in_place(rows, 5.0)
    rows.add({"x": np.full((2, 3), 7, np.float32), "w": second["x"]})
    third = _written_in_place(rows, 9.0)
    rows.add({"x": np.ones((2, 3), np.float64), "w": third["x"]})  # another dtype: a list
    expected = [
        first,
        {"x": np.full((2, 3), 7, np.float32), "w": np.full((2, 3), 5, np.float32)},
        {"x": np.ones((2, 3), np.float64), "w": np.full((2, 3), 9, np.float32)},
    ]
    assert_same(rows.batch(), stack(expected, _describe))
