"""Batches as flat leaves: written by a worker straight into shared memory, read by the parent.

A batch is a tree of dicts, lists and tuples whose leaves are numpy arrays. `write_stacked`
(`tpufeed.ops.slot_layout`) stacks a list of elements leaf by leaf directly into a slot buffer
and returns a small, picklable layout; `StackedRows` does the same one element at a time, as the
elements are made; `read_batch` rebuilds the tree in the parent. Leaves that cannot live in shared memory
(bytes, str, object arrays) travel inside the layout. Unbatched elements go the same way,
unstacked (`write_elements`, `read_elements`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tpufeed.ops.rows import StackedRows
from tpufeed.ops.slot_layout import (
    LeafSpec,
    aligned,
    in_slot,
    layout_size,
    write_batch,
    write_stacked,
)
from tpufeed.ops.stacking import unflatten

__all__ = [
    "LeafSpec",
    "StackedRows",
    "layout_size",
    "read_batch",
    "read_elements",
    "write_batch",
    "write_elements",
    "write_stacked",
]


def read_batch(layout: tuple, buffer: Any, copy: bool = True) -> Any:
    """The batch of `layout`, copied out of `buffer` into ordinary memory (or, not `copy`ed,
    as views of it)."""
    treedef, specs = layout
    leaves = []
    for spec in specs:
        if spec[0] == "inline":
            leaves.append(spec[1])
        else:
            dtype, shape, offset = spec
            leaf = np.ndarray(shape, np.dtype(dtype), buffer=buffer, offset=offset)
            leaves.append(leaf.copy() if copy else leaf)
    return unflatten(treedef, leaves)


def write_elements(
    elements: Sequence[Any], buffer_for: Callable[[int], memoryview]
) -> tuple | None:
    """Unbatched elements (a pipeline without batch, or one whose parent packs) written into
    one slot as they are, each array at its own offset: the parent copies the slot once and
    hands out views of that copy, instead of unpickling every array from the pipe.

    Elements that are numpy arrays, or dicts or tuples of them, qualify; any other leaf (a str,
    an int, an object array) travels in the layout. Other elements, or elements of different
    structures, return None: they are sent pickled, as they are (and so are elements the
    worker finds no room for in /dev/shm: unbatched pipelines never needed it).
    """
    split = _element_columns(elements)
    if split is None:
        return None
    keys, columns = split
    specs: list[tuple[Any, ...]] = []
    total = 0
    for column in columns:
        head = column[0]
        if (
            type(head) is np.ndarray
            and in_slot(head)
            and all(type(x) is np.ndarray and x.dtype == head.dtype for x in column)
        ):
            offsets = []
            for x in column:
                offsets.append(total)
                total += aligned(x.nbytes)
            specs.append((head.dtype.str, [x.shape for x in column], offsets))
        elif keys is None:
            return None
        else:
            specs.append(("inline", column))
    if not total:
        return None
    buffer = buffer_for(total)
    for column, spec in zip(columns, specs):
        if spec[0] != "inline":
            for x, offset in zip(column, spec[2]):
                np.ndarray(x.shape, x.dtype, buffer=buffer, offset=offset)[...] = x
    return type(elements[0]).__name__, keys, specs, total


def _element_columns(
    elements: Sequence[Any],
) -> tuple[tuple[Any, ...] | int | None, list[list[Any]]] | None:
    """(keys, one list per leaf) of elements that are all dicts with the same keys, all tuples
    of one length, or all arrays (keys None); None for anything else."""
    first = elements[0]
    kind = type(first)
    if kind is dict:
        keys = tuple(first)
        if not all(type(e) is dict and tuple(e) == keys for e in elements):
            return None
        return keys, [[e[k] for e in elements] for k in first]
    if kind is tuple:
        width = len(first)
        if not all(type(e) is tuple and len(e) == width for e in elements):
            return None
        return width, [[e[j] for e in elements] for j in range(width)]
    if kind is np.ndarray:
        return None, [list(elements)]
    return None


def read_elements(layout: tuple, buffer: Any) -> list[Any]:
    """The elements of `write_elements`' layout, as views of one copy of the slot (so the slot
    is free at once, and the copy goes when the last element does)."""
    kind, keys, specs, total = layout
    flat = np.frombuffer(buffer, np.uint8, count=total).copy()
    columns: list[list[Any]] = []
    for spec in specs:
        if spec[0] == "inline":
            columns.append(spec[1])
        else:
            dtype = np.dtype(spec[0])
            columns.append(
                [
                    np.ndarray(shape, dtype, buffer=flat, offset=offset)
                    for shape, offset in zip(spec[1], spec[2])
                ]
            )
    if kind == "dict":
        return [dict(zip(keys, values)) for values in zip(*columns)]
    if kind == "tuple":
        return list(zip(*columns))
    return columns[0]
