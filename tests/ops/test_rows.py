"""`StackedRows`: a batch stacked one element at a time gives what `stack` gives for the whole
list (values, dtypes, errors), in a slot or in memory, whatever the elements are; so does a
small batch, kept as a list and stacked at the end (`listed`)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.run.workers.test_layout import assert_same
from tpufeed.errors import BatchError
from tpufeed.ops.rows import ROWS_FROM_BYTES, StackedRows
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


# Row by row from the first byte, or every batch of these tests kept as a list (`listed`).
MODES = {"rows": 0, "listed": ROWS_FROM_BYTES}


def _both(elements: list, rows: int | None = None, rows_from: int = 0) -> tuple:
    """The batch through a slot (its layout read back) and in memory; asserts one slot."""
    rows = len(elements) if rows is None else rows
    slot = _Slot()
    in_slot = StackedRows(rows, slot, _describe, rows_from)
    in_memory = StackedRows(rows, None, _describe, rows_from)
    for element in elements:
        in_slot.add(element)
        in_memory.add(element)
    assert in_slot.count == in_memory.count == len(elements)
    assert in_slot.listed is in_memory.listed is (rows_from > 0)
    layout = in_slot.result()
    assert slot.calls == 1
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
@pytest.mark.parametrize("mode", sorted(MODES))
def test_rows_give_what_stack_gives(n, mode):
    elements = _elements(n)
    from_slot, in_memory, layout = _both(elements, rows_from=MODES[mode])
    want = stack(elements)
    assert_same(from_slot, want)
    assert_same(in_memory, want)
    kinds = {key: spec[0] for key, spec in zip(["image", "label", "name"], layout[1])}
    assert kinds["image"] == "<f4" and kinds["name"] == "inline"
    # stacked at the end, labels travel in the slot too (`write_stacked`)
    assert kinds["label"] == ("inline" if mode == "rows" else "<i8")


@pytest.mark.parametrize("mode", sorted(MODES))
def test_flat_dicts_with_keys_in_another_order_stack_by_key(mode):
    a = {"x": np.zeros(2, np.float32), "y": np.ones(3, np.int32)}
    b = {"y": np.full(3, 7, np.int32), "x": np.full(2, 5, np.float32)}
    from_slot, in_memory, _ = _both([a, b], rows_from=MODES[mode])
    assert_same(from_slot, stack([a, b]))
    assert_same(in_memory, stack([a, b]))


@pytest.mark.parametrize("mode", sorted(MODES))
def test_fewer_elements_than_rows_make_a_shorter_batch(mode):
    elements = _elements(3)
    from_slot, in_memory, _ = _both(elements, rows=8, rows_from=MODES[mode])  # 5 dropped on the way
    assert_same(from_slot, stack(elements))
    assert_same(in_memory, stack(elements))


@pytest.mark.parametrize("mode", sorted(MODES))
def test_more_elements_than_rows_still_make_the_whole_batch(mode):
    elements = _elements(5)
    from_slot, in_memory, _ = _both(elements, rows=3, rows_from=MODES[mode])
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
@pytest.mark.parametrize("mode", sorted(MODES))
def test_an_element_that_cannot_be_stacked_fails_as_stack_does(bad, mode):
    elements = [{"image": np.zeros((4, 5, 3), np.float32), "label": i} for i in range(3)]
    elements.insert(2, bad)
    with pytest.raises(BatchError) as expected:
        stack(elements, _describe)
    rows_from = MODES[mode]
    for rows in (
        StackedRows(4, _Slot(), _describe, rows_from),
        StackedRows(4, None, _describe, rows_from),
    ):
        for element in elements:
            rows.add(element)
        with pytest.raises(BatchError) as got:
            rows.result()
        assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_bare_arrays_and_tuples_are_rows_too(mode):
    arrays = [np.arange(6, dtype=np.uint8).reshape(2, 3) + i for i in range(4)]
    from_slot, in_memory, _ = _both(arrays, rows_from=MODES[mode])
    assert_same(from_slot, stack(arrays))
    assert_same(in_memory, stack(arrays))
    pairs = [(np.full(2, i, np.float32), np.int32(i)) for i in range(4)]
    from_slot, in_memory, _ = _both(pairs, rows_from=MODES[mode])
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
    rows = StackedRows(3, slot if where == "slot" else None, _describe, rows_from=0)
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
    rows = StackedRows(3, None, _describe, rows_from=0)
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


def test_the_first_element_decides_rows_or_a_list_by_the_bytes_of_the_batch():
    """48 bytes an element: 4 rows are 192 bytes (aligned to 64), listed below that."""
    element = {"x": np.zeros(12, np.float32), "label": 3}
    at = StackedRows(4, _Slot(), _describe, rows_from=192)
    below = StackedRows(4, _Slot(), _describe, rows_from=193)
    at.add(element)
    below.add(element)
    assert not at.listed and below.listed
    assert below.row("x", (12,), np.float32) is None  # a listed batch hands out no row


def test_the_default_lists_w1_batches_and_writes_w4_batches_row_by_row():
    w1 = StackedRows.in_memory(256, _describe)
    w1.add({"x": np.zeros(1024, np.uint8)})
    w4 = StackedRows.in_memory(64, _describe)
    w4.add({"image": np.zeros((224, 224, 3), np.float32), "label": 1})
    assert w1.listed and not w4.listed


@pytest.mark.parametrize("mode", sorted(MODES))
def test_the_rest_handed_over_at_once_is_the_same_batch(mode):
    elements = _elements(6)
    slots = _Slot(), _Slot()
    batches = []
    for slot in slots:
        rows = StackedRows(6, slot, _describe, MODES[mode])
        rows.add(elements[0])
        if slot is slots[0]:
            rows.extend(elements[1:])
        else:
            for element in elements[1:]:
                rows.add(element)
        assert rows.count == 6 and slot.calls == (0 if mode == "listed" else 1)
        batches.append(read_batch(rows.result(), slot.buffer))
    assert_same(batches[0], batches[1])
    assert_same(batches[0], stack(elements))
