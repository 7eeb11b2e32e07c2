"""Walking the leaves of a batch (dicts, lists, tuples, namedtuples of arrays) with their paths.

The adapters convert leaves one by one and name the offending leaf, e.g. `['image']` or
`[1]['mask']`, when one cannot go where it is sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tpufeed.errors import BatchError

LeafFn = Callable[[str, Any], Any]


def map_leaves(fn: LeafFn, tree: Any, path: str = "") -> Any:
    """Applies fn(path, leaf) to every leaf, keeping the structure (namedtuples included).

    >>> map_leaves(lambda p, x: p, {"a": (1, 2)})
    {'a': ("['a'][0]", "['a'][1]")}
    """
    if isinstance(tree, dict):
        return {k: map_leaves(fn, v, f"{path}[{k!r}]") for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        parts = [map_leaves(fn, v, f"{path}[{i}]") for i, v in enumerate(tree)]
        if isinstance(tree, list):
            return parts
        return type(tree)(*parts) if hasattr(tree, "_fields") else tuple(parts)
    return fn(path, tree)


def numeric_array(path: str, leaf: Any, target: str) -> np.ndarray:
    """`leaf` as a numeric or boolean numpy array, or a BatchError naming the leaf."""
    array = np.asarray(leaf) if not isinstance(leaf, np.ndarray) else leaf
    if array.dtype.kind not in "biufc":
        what = "bytes or str" if array.dtype.kind in "OSU" else f"dtype {array.dtype}"
        raise BatchError(
            f"{target} cannot hold batch leaf {path or '(the batch itself)'}: it holds {what} "
            f"values (numpy dtype {array.dtype}); only numbers and booleans can go there. Drop "
            "the leaf, or turn it into numbers (token ids, a label index) in a map() before batch()"
        )
    return array


def describe_path(path: str) -> str:
    return path or "(the batch itself)"
