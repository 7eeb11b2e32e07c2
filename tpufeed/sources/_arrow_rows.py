"""Rows of an Arrow table as tpufeed elements: one dict per row, converted a column at a time.

The conventions (shared by `Dataset.from_parquet` and `Dataset.from_huggingface`):

- integers, floats, booleans, dates, timestamps and durations: numpy scalars (`np.int64(3)`);
- strings: `str`; binary: `bytes`;
- null: `None`, whatever the type (an integer column with nulls stays integer, not float NaN);
- a list (variable or fixed size): a numpy array; a list of lists: a 2-D array when every inner
  list of the row has the same length, else a Python list of 1-D arrays (ragged); a list holding
  nulls: an object array with `None` in their places; a list of strings: a numpy str array;
- a struct: a dict of its fields, converted by the same rules; a list of structs: a list of dicts;
- anything else (decimals, maps, unions): what pyarrow's `to_pylist` gives.

Arrays are fresh copies, writable, sharing nothing with Arrow's buffers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["rows_of"]


def rows_of(table: pa.Table, names: list[str] | None = None) -> list[dict[str, Any]]:
    """The rows of `table` (its columns `names`, default all) as dicts, in row order."""
    names = list(table.column_names) if names is None else names
    if not names:
        return [{} for _ in range(table.num_rows)]
    columns = [column_values(table.column(name)) for name in names]
    return [dict(zip(names, values)) for values in zip(*columns)]


def column_values(column: pa.ChunkedArray | pa.Array) -> list[Any]:
    """One converted value per row of `column`."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return _values(column)


def _values(arr: pa.Array) -> list[Any]:
    kind = arr.type
    if pa.types.is_dictionary(kind):
        return _values(arr.dictionary_decode())
    if _is_list(kind):
        return _lists(arr)
    if pa.types.is_struct(kind):
        return _structs(arr)
    if _numpy_kind(kind):
        values = _numpy(arr)
        if values is not None:
            out: list[Any] = list(values)
            if arr.null_count:
                for i in np.flatnonzero(~_valid(arr)).tolist():
                    out[i] = None
            return out
    return arr.to_pylist()  # strings, binary and the rest: plain Python values


def _is_list(kind: pa.DataType) -> bool:
    return (
        pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    )


def _numpy_kind(kind: pa.DataType) -> bool:
    return (
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_timestamp(kind)
        or pa.types.is_date(kind)
        or pa.types.is_duration(kind)
    )


def _valid(arr: pa.Array) -> np.ndarray:
    return np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)


def _numpy(arr: pa.Array) -> np.ndarray | None:
    """The values as a writable numpy array, nulls filled with zeros; None if numpy cannot
    hold them (the caller then falls back to Python values)."""
    try:
        if arr.null_count:
            arr = pc.fill_null(
                arr, pa.scalar(False if pa.types.is_boolean(arr.type) else 0, arr.type)
            )
        values = arr.to_numpy(zero_copy_only=False)
    except (pa.ArrowException, TypeError, ValueError):
        return None
    return None if values.dtype == object else np.array(values)


def _lists(arr: pa.Array) -> list[Any]:
    lengths = np.asarray(
        pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False), dtype=np.int64
    )
    flat = arr.flatten()  # skips what backs null lists, honours slicing offsets
    if len(flat) != int(lengths.sum()):  # a fixed-size list's null slots still hold values
        flat = pc.list_flatten(arr.filter(arr.is_valid()))
    bounds = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    spans = zip(bounds[:-1], bounds[1:])
    parts: list[Any]
    if _numpy_kind(flat.type) and not flat.null_count and (values := _numpy(flat)) is not None:
        parts = [values[a:b] for a, b in spans]
    else:
        items = _values(flat)
        empty = _empty(flat.type)
        parts = [_as_array(items[a:b], empty) for a, b in spans]
    if arr.null_count:
        for i in np.flatnonzero(~_valid(arr)).tolist():
            parts[i] = None
    return parts


def _empty(kind: pa.DataType) -> np.ndarray:
    """An empty list's array: one axis per level of nesting, typed like its items where numpy
    can hold them."""
    depth = 1
    while _is_list(kind):
        kind, depth = kind.value_type, depth + 1
    try:  # not `kind.to_pandas_dtype()`: that imports pandas, which the parquet extra lacks
        dtype = pa.array([], type=kind).to_numpy(zero_copy_only=False).dtype
    except (pa.ArrowException, NotImplementedError, TypeError):
        dtype = np.dtype(object)
    return np.empty((0,) * depth, dtype=dtype)


def _as_array(items: list[Any], empty: np.ndarray) -> Any:
    if not items:
        return empty.copy()
    if any(item is None for item in items):
        out = np.empty(len(items), dtype=object)
        out[:] = items
        return out
    first = items[0]
    if isinstance(first, np.ndarray):  # a list of lists: 2-D when rectangular, else ragged
        if all(isinstance(a, np.ndarray) and a.shape == first.shape for a in items):
            return np.stack(items)
        return items
    if isinstance(first, (dict, bytes, list)):
        return items
    return np.array(items)


def _structs(arr: pa.Array) -> list[Any]:
    names = [arr.type.field(i).name for i in range(arr.type.num_fields)]
    fields = [_values(child) for child in arr.flatten()]
    rows: list[Any] = (
        [dict(zip(names, values)) for values in zip(*fields)]
        if names
        else [{} for _ in range(len(arr))]
    )
    if arr.null_count:
        for i in np.flatnonzero(~_valid(arr)).tolist():
            rows[i] = None
    return rows
