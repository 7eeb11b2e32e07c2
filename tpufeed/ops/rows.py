"""A batch stacked one element at a time, as its elements are made (`StackedRows`), where that
pays.

Record stages used to make all the elements of a batch and then stack them: 64 float32 images
(38 MB) written, then read back through DRAM to be stacked. Written into its row of the batch
as soon as it is made, an element is still in the cache (W4, crop, flip, normalise and stack
in one process: 1.71 -> 1.26 CPU ms an image, `benchmarks/w4_order.py`). A worker writes the
rows into its shared-memory slot and sends the layout (`tpufeed.run.workers.layout` reads
it); a pipeline without workers gets arrays of its own.

Row by row costs a Python-level write for each element, which a small batch, still in the
cache when stacked, does not win back (W1, 1 KiB records: 34% more instructions a batch than a
list stacked in one call). So the first element decides: a batch whose arrays come to fewer than
`ROWS_FROM_BYTES` keeps its elements as they are made and stacks them in one call at the end
(`listed`), and its maker may hand over the rest at once (`extend`).

>>> rows = StackedRows.in_memory(2, lambda i: f"element {i}")
>>> rows.add({"x": np.zeros(3, np.float32), "y": 1})
>>> rows.add({"x": np.ones(3, np.float32), "y": 2})
>>> batch = rows.batch()
>>> batch["x"].shape, batch["y"].tolist(), rows.listed
((2, 3), [1, 2], True)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tpufeed.ops.slot_layout import (
    LeafSpec,
    aligned,
    in_slot,
    layout_size,
    write_batch,
    write_stacked,
)
from tpufeed.ops.stacking import TreeDef, flatten, stack, unflatten

__all__ = ["ROWS_FROM_BYTES", "RowFor", "StackedRows"]

# A batch (its first element's arrays, times its rows) of at least this many bytes is stacked
# row by row as its elements are made; a smaller one is kept as a list and stacked at the end.
# Measured (`python -m benchmarks.stacking_cost`, CPU an element, rows / listed): 1.88 for 256
# rows of 1 KiB, 1.36 of 12 KiB (3 MiB), ~1.0 at 8 MiB a batch, 0.95 at 16 MiB, 0.28 for 64
# rows of 600 KiB (W4's 38 MiB: the list goes through DRAM, and into fresh pages).
ROWS_FROM_BYTES = 8 << 20

# (key, shape, dtype) -> the next element's row of that array, to write in place, or None
RowFor = Callable[[Any, tuple[int, ...], Any], "np.ndarray | None"]


class StackedRows:
    """A batch of `rows` elements stacked as they are made: each array leaf is written into its
    row of the slot at once, while it is still in the cache (writing 64 float32 images, then
    reading them back to stack them, goes through DRAM: W4 1.71 -> 1.26 CPU ms an image).

    The slot is taken at the first element, sized from it; `buffer_for` is called exactly
    once. A batch smaller than `rows_from` bytes (default `ROWS_FROM_BYTES`) is `listed`: its elements are kept as they are
    and stacked straight into the slot at the end (`write_stacked`), a row by row write would
    cost more than it saves. Leaves that cannot live in shared memory are stacked at the end and travel in the
    layout. An element that does not fit the first one's layout (other keys, another shape or
    dtype) turns the batch back into a list of elements, stacked at the end as `stack` would
    (the same errors, the same values), into the slot where it fits, else in the layout.
    `in_memory` rows are arrays of their own, one a leaf, and come back from `batch()`.

    >>> rows = StackedRows(64, buffer_for, describe)  # doctest: +SKIP
    >>> for element in made: rows.add(element)  # doctest: +SKIP
    >>> layout = rows.layout()  # doctest: +SKIP
    """

    @classmethod
    def in_memory(cls, rows: int, describe: Callable[[int], str]) -> StackedRows:
        """Rows in arrays of their own (one a leaf), for `batch()`."""
        return cls(rows, None, describe)

    def __init__(
        self,
        rows: int,
        buffer_for: Callable[[int], memoryview] | None,
        describe: Callable[[int], str],
        rows_from: int | None = None,
    ):
        self._rows, self._buffer_for, self._describe = rows, buffer_for, describe
        self._rows_from = ROWS_FROM_BYTES if rows_from is None else rows_from
        self.count = 0
        self.listed = False  # the first element was small: the batch is stacked at the end
        self._treedef: TreeDef | None = None
        self._keys: Any = None  # the first element's dict keys, for the flat-dict fast check
        self._outs: list[np.ndarray | None] = []  # per leaf: its (rows, ...) view, or None
        self._offsets: list[int] = []  # per leaf: where its rows start in the slot
        self._kept: list[list[Any]] = []  # per leaf not in shared memory: its values
        self._buffer: memoryview | None = None
        self._elements: list[Any] | None = None  # the batch as a list, once an element differs
        self._offered: tuple[int, np.ndarray] | None = None  # (leaf, its row) handed by `row`

    def row(self, key: Any, shape: tuple[int, ...], dtype: Any) -> np.ndarray | None:
        """The next element's row of array `key`, for the stage making it to write in place
        (`Normalize.into`), where the batch is a flat dict whose `key` rows have this shape and
        dtype; else None (before the first element, once the batch is a list, past the last
        row). An element whose `key` is that very row is not copied again."""
        if self._keys is None or self._elements is not None or self.count >= self._rows:
            return None
        index = next((i for i, k in enumerate(self._keys) if k == key), None)
        out = None if index is None else self._outs[index]
        if out is None or out.shape[1:] != tuple(shape) or out.dtype != np.dtype(dtype):
            return None
        assert index is not None  # out was found
        place: np.ndarray = out[self.count]
        self._offered = (index, place)
        return place

    def add(self, element: Any) -> None:
        """Writes the next element into its row (or keeps it, once the batch is a list)."""
        offered, self._offered = self._offered, None
        if self._elements is not None:
            self._elements.append(element)
        elif self._treedef is None:
            self._start(element)
        else:
            leaves = self._leaves(element) if self.count < self._rows else None
            if leaves is None:  # its row may be written again: keep copies of what is there
                self._elements = [*self._made(), _apart(element, offered)]
            else:
                self._write(_apart_leaves(leaves, offered), offered)
        self.count += 1

    def extend(self, elements: list[Any]) -> None:
        """Adds elements made without a row handed out (the rest of a `listed` batch at once)."""
        if self._elements is not None and self._offered is None:
            self._elements.extend(elements)
            self.count += len(elements)
        else:
            for element in elements:
                self.add(element)

    def _leaves(self, element: Any) -> list[Any] | None:
        """The element's leaves where it fits the first element's layout, else None."""
        if self._keys is not None:
            if type(element) is not dict or element.keys() != self._keys:
                return None
            leaves = [element[key] for key in self._keys]  # keys in any order, as `stack`
        else:
            treedef, leaves = flatten(element)
            if treedef != self._treedef:
                return None
        for leaf, out in zip(leaves, self._outs):
            if out is not None and not (
                type(leaf) is np.ndarray and leaf.shape == out.shape[1:] and leaf.dtype == out.dtype
            ):
                return None
        return leaves

    def _start(self, element: Any) -> None:
        treedef, leaves = flatten(element)
        sizes = [
            aligned(self._rows * leaf.nbytes) if type(leaf) is np.ndarray and in_slot(leaf) else 0
            for leaf in leaves
        ]
        if sum(sizes) < self._rows_from:
            self.listed, self._elements = True, [element]
            return
        self._treedef = treedef
        if type(element) is dict and all(d == ("leaf",) for d in treedef[2]):
            self._keys = dict.fromkeys(element).keys()  # the order of its leaves
        if self._buffer_for is not None:
            self._buffer = self._buffer_for(sum(sizes))
        offset = 0
        for leaf, size in zip(leaves, sizes):
            self._offsets.append(offset)
            if not size:
                self._outs.append(None)
            elif self._buffer is None:
                self._outs.append(np.empty((self._rows, *leaf.shape), leaf.dtype))
            else:
                shape = (self._rows, *leaf.shape)
                self._outs.append(np.ndarray(shape, leaf.dtype, self._buffer, offset))
            offset += size
        self._kept = [[] for out in self._outs if out is None]
        self._write(leaves)

    def _write(self, leaves: list[Any], offered: tuple[int, np.ndarray] | None = None) -> None:
        kept = iter(self._kept)
        written = offered[1] if offered is not None else None  # in place already, if it is there
        for leaf, out in zip(leaves, self._outs):
            if out is None:
                next(kept).append(leaf)
            elif leaf is not written:
                out[self.count] = leaf

    def _made(self) -> list[Any]:
        """The elements written so far, copied back out of their rows."""
        made = []
        assert self._treedef is not None  # a first element was written
        for i in range(self.count):
            kept = iter(self._kept)
            leaves = [next(kept)[i] if out is None else out[i].copy() for out in self._outs]
            made.append(unflatten(self._treedef, leaves))
        return made

    def result(self) -> Any | None:
        """`batch()` of `in_memory` rows, else `layout()`."""
        return self.batch() if self._buffer_for is None else self.layout()

    def batch(self) -> Any | None:
        """The batch (of `in_memory` rows); None for a batch of no element."""
        if self._elements is not None:
            return stack(self._elements, self._describe)
        if self._treedef is None:
            return None
        kept = iter(self._kept)
        leaves = [
            stack(next(kept), self._describe) if out is None else out[: self.count]
            for out in self._outs
        ]
        return unflatten(self._treedef, leaves)

    def layout(self) -> tuple | None:
        """The batch's layout (`read_batch` reads it); None for a batch of no element."""
        if self._elements is not None:
            return self._as_list()
        if self._treedef is None:
            return None
        specs: list[LeafSpec] = []
        kept = iter(self._kept)
        for out, offset in zip(self._outs, self._offsets):
            if out is None:
                specs.append(("inline", stack(next(kept), self._describe)))
            else:
                specs.append((out.dtype.str, (self.count, *out.shape[1:]), offset))
        return self._treedef, specs

    def _as_list(self) -> tuple:
        """The elements stacked at once: a `listed` batch by `write_stacked`, one that turned
        into a list on the way into the slot already taken where they fit, else in the
        layout."""
        buffer, buffer_for = self._buffer, self._buffer_for
        assert self._elements is not None and buffer_for is not None
        if buffer is None:
            return write_stacked(self._elements, buffer_for, self._describe)
        batch = stack(self._elements, self._describe)
        treedef, leaves = flatten(batch)
        if layout_size([np.asarray(leaf) for leaf in leaves]) <= len(buffer):
            return write_batch(batch, lambda nbytes: buffer)
        return treedef, [("inline", leaf) for leaf in leaves]


def _apart_leaves(leaves: list[Any], offered: tuple[int, np.ndarray] | None) -> list[Any]:
    """`leaves`, where the row handed out (`offered`) is in any but its own place, copied out
    of it: it is about to be written over."""
    if offered is None:
        return leaves
    index, row = offered
    return [
        leaf.copy()
        if i != index and isinstance(leaf, np.ndarray) and np.may_share_memory(leaf, row)
        else leaf
        for i, leaf in enumerate(leaves)
    ]


def _apart(element: Any, offered: tuple[int, np.ndarray] | None) -> Any:
    """`element` with every array that shares the row handed out copied out of it."""
    if offered is None:
        return element
    treedef, leaves = flatten(element)
    row = offered[1]
    copies = [
        leaf.copy() if isinstance(leaf, np.ndarray) and np.may_share_memory(leaf, row) else leaf
        for leaf in leaves
    ]
    return unflatten(treedef, copies)
