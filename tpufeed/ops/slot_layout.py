"""How a stacked batch lies in a slot (a worker's shared memory, or any buffer): each array leaf
at an aligned offset, described by a small picklable layout; what cannot live there (bytes,
str, object arrays) travels in the layout itself.

`write_stacked` stacks a list of elements leaf by leaf straight into the slot; `write_batch`
copies an already stacked batch there. `tpufeed.run.workers.layout.read_batch` reads a layout
back.

>>> buffer = bytearray(128)
>>> treedef, specs = write_stacked(
...     [{"x": np.ones(2, np.float32)}] * 3, lambda n: memoryview(buffer), str
... )
>>> specs
[('<f4', (3, 2), 0)]
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tpufeed.ops.stacking import TreeDef, flatten, same_keys, stack, stack_into, uniform

__all__ = ["LeafSpec", "aligned", "in_slot", "layout_size", "write_batch", "write_stacked"]

_ALIGN = 64

# A leaf of a layout: ("inline", value), travelling as is, or (dtype.str, shape, offset) in the slot.
LeafSpec = tuple[Any, ...]


def in_slot(leaf: Any) -> bool:
    """Whether a leaf can live in a slot: an array of fixed-size values."""
    return isinstance(leaf, np.ndarray) and leaf.dtype != object and leaf.dtype.kind not in "OUSV"


def aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def layout_size(leaves: Sequence[Any]) -> int:
    """Bytes a batch with these (already stacked) leaves needs in a slot."""
    return sum(aligned(leaf.nbytes) for leaf in leaves if in_slot(leaf))


def write_batch(batch: Any, buffer_for: Callable[[int], memoryview]) -> tuple:
    """Copies a stacked batch into a slot; returns its layout. `buffer_for(nbytes)` gives the slot."""
    treedef, leaves = flatten(batch)
    leaves = [np.asarray(leaf) if not isinstance(leaf, (bytes, str)) else leaf for leaf in leaves]
    buffer = buffer_for(layout_size(leaves))
    specs: list[LeafSpec] = []
    offset = 0
    for leaf in leaves:
        if in_slot(leaf):
            view = np.ndarray(leaf.shape, leaf.dtype, buffer=buffer, offset=offset)
            view[...] = leaf
            specs.append((leaf.dtype.str, leaf.shape, offset))
            offset += aligned(leaf.nbytes)
        else:
            specs.append(("inline", leaf))
    return treedef, specs


def write_stacked(
    elements: Sequence[Any], buffer_for: Callable[[int], memoryview], describe: Callable[[int], str]
) -> tuple:
    """Stacks `elements` leaf by leaf straight into a slot; returns the layout.

    Everything is checked before the slot is taken, so `buffer_for` is called exactly once.
    """
    treedef, columns = _columns(elements)
    if columns is None:
        return write_batch(stack(elements, describe), buffer_for)  # stack() names the mismatch
    m = len(elements)
    plans: list[tuple[Any, ...]] = []  # ("stack", dtype, shape) or ("stacked", stacked column)
    for column in columns:
        first = column[0]
        if isinstance(first, np.ndarray) and in_slot(first):
            if not uniform(column):
                return write_batch(stack(elements, describe), buffer_for)
            plans.append(("stack", first.dtype, (m, *first.shape)))
        else:
            plans.append(("stacked", stack(column, describe)))
    sizes = []
    for plan in plans:
        if plan[0] == "stack":
            sizes.append(aligned(int(np.prod(plan[2])) * plan[1].itemsize))
        else:
            sizes.append(aligned(plan[1].nbytes) if in_slot(plan[1]) else 0)
    buffer = buffer_for(sum(sizes))
    specs: list[LeafSpec] = []
    offset = 0
    for column, plan, size in zip(columns, plans, sizes):
        if plan[0] == "stack":
            stack_into(column, np.ndarray(plan[2], plan[1], buffer=buffer, offset=offset))
            specs.append((plan[1].str, plan[2], offset))
        elif in_slot(plan[1]):
            out = np.ndarray(plan[1].shape, plan[1].dtype, buffer=buffer, offset=offset)
            out[...] = plan[1]
            specs.append((plan[1].dtype.str, plan[1].shape, offset))
        else:
            specs.append(("inline", plan[1]))
        offset += size
    return treedef, specs


def _columns(elements: Sequence[Any]) -> tuple[TreeDef | None, list[list[Any]] | None]:
    """(treedef, one list of leaves per leaf position), or (None, None) if structures differ.

    Flat dicts and bare leaves, the common cases, skip the general flatten of every element.
    """
    first = elements[0]
    if isinstance(first, dict) and not any(
        isinstance(v, (dict, list, tuple)) for v in first.values()
    ):
        keys = first.keys()
        if not same_keys(elements, keys):
            return None, None
        treedef = ("dict", tuple(keys), tuple(("leaf",) for _ in keys))
        return treedef, [list(map(operator.itemgetter(k), elements)) for k in keys]
    if not isinstance(first, (dict, list, tuple)):
        return ("leaf",), [list(elements)]
    treedef, leaves = flatten(first)
    columns = [[leaf] for leaf in leaves]
    for element in elements[1:]:
        element_def, leaves = flatten(element)
        if element_def != treedef:
            return None, None
        for column, leaf in zip(columns, leaves):
            column.append(leaf)
    return treedef, columns
