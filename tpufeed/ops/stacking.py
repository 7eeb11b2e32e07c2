"""Batches: stacking elements (dicts, tuples, lists and arrays of equal shape, recursively), and
flattening, slicing and joining stacked batches."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tpufeed.errors import BatchError

Describe = Callable[[int], str]
TreeDef = tuple

_dtype_of = operator.attrgetter("dtype")
_shape_of = operator.attrgetter("shape")


def stack(elements: Sequence[Any], describe: Describe | None = None) -> Any:
    """Stacks a list of same-structured elements into one of numpy arrays (leading batch axis).

    `describe(i)` names element i (its record) in error messages.

    >>> stack([{"x": np.zeros(2)}, {"x": np.ones(2)}])["x"].shape
    (2, 2)
    """
    if not elements:
        raise BatchError("cannot stack an empty batch")
    return _stack(elements, "", describe or (lambda i: f"element {i}"))


def _stack(elements: Sequence[Any], where: str, describe: Describe) -> Any:
    first = elements[0]
    if isinstance(first, dict):
        keys = first.keys()
        same = same_keys(elements, keys)
        for i, e in enumerate(() if same else elements):
            if not isinstance(e, dict) or e.keys() != keys:
                got = sorted(e.keys()) if isinstance(e, dict) else type(e).__name__
                raise BatchError(
                    f"cannot batch{_at(where)}: {describe(0)} has keys {sorted(keys)} "
                    f"but {describe(i)} has {got}"
                )
        return {k: _stack([e[k] for e in elements], f"{where}[{k!r}]", describe) for k in keys}
    if isinstance(first, (tuple, list)) and not is_leaf_list(first):
        for i, e in enumerate(elements):
            if type(e) is not type(first) or len(e) != len(first):
                raise BatchError(
                    f"cannot batch{_at(where)}: {describe(0)} is a {type(first).__name__} "
                    f"of {len(first)} but {describe(i)} is {_kind(e)}"
                )
        parts = [
            _stack([e[j] for e in elements], f"{where}[{j}]", describe) for j in range(len(first))
        ]
        return type(first)(parts) if isinstance(first, list) else _same_tuple(first, parts)
    if isinstance(first, (bytes, str)):
        base = str if isinstance(first, str) else bytes
        if not all(isinstance(e, base) for e in elements):
            _mixed_types(elements, where, describe)
        out = np.empty(len(elements), dtype=object)
        out[:] = elements
        return out
    if type(first) is np.ndarray and first.ndim:
        stacked = _stack_arrays(elements, first)
        if stacked is not None:
            return stacked
    return _stack_values(elements, where, describe)


def _stack_arrays(elements: Sequence[Any], first: np.ndarray) -> np.ndarray | None:
    """`np.stack(elements)` where every element has `first`'s shape and dtype, else None.

    One `np.array`, which finds the shape and dtype of all the elements in its C loop: W1, 256
    arrays of 1 KiB, 0.58M instructions against 0.84M for checking them (`uniform`) and one
    `np.concatenate`. Its result is np.stack's wherever it is the shape and dtype asked (for
    elements of other dtypes, both promote alike; anything else is left to np.stack, which
    names the mismatch)."""
    try:
        out = np.array(elements)
    except (ValueError, TypeError):  # ragged, or values numpy cannot hold together
        return None
    if out.shape[1:] != first.shape or out.dtype != first.dtype:
        return None
    return out


def _stack_values(elements: Sequence[Any], where: str, describe: Describe) -> np.ndarray:
    """numpy's stack of leaf values (arrays, numbers), its failures named by element."""
    first = elements[0]
    try:
        out = np.stack(elements)
    except (ValueError, TypeError):
        shapes = [np.shape(e) for e in elements]
        for i, shape in enumerate(shapes):
            if shape != shapes[0]:
                raise BatchError(
                    f"cannot batch{_at(where)}: {describe(0)} has shape {shapes[0]} but "
                    f"{describe(i)} has shape {shape}; pad or resize in a map before batch"
                ) from None
        raise BatchError(
            f"cannot batch{_at(where)}: values of types "
            f"{sorted({type(e).__name__ for e in elements})} do not stack"
        ) from None
    if out.dtype.kind in "USO" and np.asarray(first).dtype.kind != out.dtype.kind:
        _mixed_types(elements, where, describe)  # numpy would turn numbers into strings
    if out.dtype.kind == "O":  # Python objects: only here is a callable possible
        _no_callables(elements, where, describe)
    return out


def uniform(column: Sequence[Any]) -> bool:
    """Whether every value of `column` has the first's dtype and shape (which `stack_into`
    needs), checked in C loops: a Python loop over a batch of 256 arrays costs twice as many
    instructions as stacking them. Counted, not hashed (`list.count` tries identity first, and
    a batch's values mostly share one dtype object; a set hashes every dtype): W1's 256 arrays,
    0.33M instructions against 0.39M."""
    try:
        dtypes = list(map(_dtype_of, column))
        shapes = list(map(_shape_of, column))
    except AttributeError:  # a value without them
        return False
    n = len(dtypes)
    return dtypes.count(dtypes[0]) == n and shapes.count(shapes[0]) == n


def stack_into(column: Sequence[np.ndarray], out: np.ndarray | None) -> np.ndarray:
    """`np.stack(column, out=out)` for arrays of one shape and dtype (`uniform`), as one
    `np.concatenate`: np.stack makes a view of every array first (W1, 256 arrays of 1 KiB:
    1.37M instructions against 0.50M)."""
    shape = column[0].shape
    if not shape:  # scalars do not concatenate
        return np.stack(column, out=out)
    if out is None:
        return np.concatenate(column).reshape(len(column), *shape)
    np.concatenate(column, out=out.reshape(len(column) * shape[0], *shape[1:]))
    return out


def _no_callables(elements: Sequence[Any], where: str, describe: Describe) -> None:
    """Refuses functions, classes and transform objects as batch values: an element that is
    a transform rather than its result means a stage was given a class or a function that
    returns one (`map(lambda e: decode)`), and the batch would be an array of them."""
    i = next((i for i, e in enumerate(elements) if callable(e)), None)
    if i is None:
        return
    value = elements[i]
    if isinstance(value, type):
        what = f"the class {value.__name__}"
    elif getattr(value, "__name__", None):
        what = f"the function {value.__name__}"
    else:
        what = f"a {type(value).__name__} object"
    raise BatchError(
        f"cannot batch{_at(where)}: {describe(i)} is {what}, which is callable: a transform, "
        "not the data it makes. Was a stage given a transform class without () "
        "(map(DecodeImage) for map(DecodeImage())), or a function returned, not called?"
    )


def _mixed_types(elements: Sequence[Any], where: str, describe: Describe) -> None:
    """Raises naming the first element whose kind of value differs from element 0's."""

    def kind(e: Any) -> str:
        return (
            "text"
            if isinstance(e, str)
            else "bytes"
            if isinstance(e, bytes)
            else np.asarray(e).dtype.kind
        )

    first = kind(elements[0])
    i = next((i for i, e in enumerate(elements) if kind(e) != first), 0)
    raise BatchError(
        f"cannot batch{_at(where)}: {describe(0)} is {type(elements[0]).__name__} "
        f"{elements[0]!r:.40} but {describe(i)} is {type(elements[i]).__name__} "
        f"{elements[i]!r:.40}; make the key one type in a map before batch"
    )


def same_keys(elements: Sequence[Any], keys: Any) -> bool:
    """Whether every element is a dict with exactly `keys` (a dict's keys view), checked in C
    loops without a keys view and a comparison for each element (W1's 256: 0.18M instructions
    against 0.37M): each is a plain dict of `len(keys)` keys, and all their keys together are
    no more than `keys`. A dict subclass answers False (the caller then checks each element)."""
    n, count = len(keys), len(elements)
    if list(map(type, elements)).count(dict) != count or list(map(len, elements)).count(n) != count:
        return False
    return len(set(keys).union(*elements)) == n


def is_leaf_list(value: Sequence[Any]) -> bool:
    return bool(value) and all(isinstance(v, (int, float, bool)) for v in value)


def _same_tuple(first: tuple, parts: list) -> tuple:
    return type(first)(*parts) if hasattr(first, "_fields") else tuple(parts)


def _kind(value: Any) -> str:
    return (
        f"a {type(value).__name__} of {len(value)}"
        if isinstance(value, (tuple, list))
        else type(value).__name__
    )


def _at(where: str) -> str:
    return f" at {where}" if where else ""


def flatten(tree: Any) -> tuple[TreeDef, list[Any]]:
    leaves: list[Any] = []
    return _flatten(tree, leaves), leaves


def _flatten(tree: Any, leaves: list[Any]) -> TreeDef:
    if isinstance(tree, dict):
        return ("dict", tuple(tree), tuple(_flatten(v, leaves) for v in tree.values()))
    if isinstance(tree, (tuple, list)) and not is_leaf_list(tree):
        kind = type(tree) if hasattr(tree, "_fields") else type(tree).__name__
        return ("seq", kind, tuple(_flatten(v, leaves) for v in tree))
    leaves.append(tree)
    return ("leaf",)


def unflatten(treedef: TreeDef, leaves: Sequence[Any]) -> Any:
    it = iter(leaves)
    return _unflatten(treedef, it)


def _unflatten(treedef: TreeDef, leaves: Any) -> Any:
    if treedef[0] == "leaf":
        return next(leaves)
    if treedef[0] == "dict":
        return {k: _unflatten(d, leaves) for k, d in zip(treedef[1], treedef[2])}
    kind, children = treedef[1], [_unflatten(d, leaves) for d in treedef[2]]
    if kind == "list":
        return children
    if kind == "tuple":
        return tuple(children)
    return kind(*children)


def concat(batches: Sequence[Any]) -> Any:
    """Concatenates batches of one structure along the batch axis."""
    if len(batches) == 1:
        return batches[0]
    treedef, _ = flatten(batches[0])
    columns = list(zip(*(flatten(b)[1] for b in batches)))
    return unflatten(treedef, [np.concatenate(column) for column in columns])


def take(batch: Any, start: int, stop: int) -> Any:
    treedef, leaves = flatten(batch)
    return unflatten(treedef, [leaf[start:stop] for leaf in leaves])
