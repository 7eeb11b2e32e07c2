"""What a Hugging Face dataset's format asks `hf[i]` to give, and how tpufeed reads it so.

`datasets.Dataset.with_format` / `set_format` / `with_transform` / `set_transform` change what
`hf[i]` returns without changing the data. `from_huggingface` honours each, or refuses it with
a message naming it; it never drops one:

- type None ("python") or "numpy", no other settings: the Arrow data read in batches, typed like
  `from_parquet`'s rows (numpy scalars and arrays, `str`, None), the format's `columns` kept
  (all of them with `output_all_columns=True`), in `hf[i]`'s order;
- a transform (`with_transform(fn)`, `set_transform(fn)`: type "custom"), or "numpy" with
  settings (`dtype=`): read through the dataset itself, `hf.__getitems__(indices)`, so the rows
  are exactly what `hf[indices]` makes, split into rows (the transform sees each read's batch,
  as a DataLoader over `hf` gives it);
- "torch", "tensorflow", "jax": refused. Their rows are framework tensors, made one row at a
  time in every worker; tpufeed batches numpy rows and hands whole batches to the framework
  (`to_torch()`, `to_tf()`, `to_jax()`), so the format is asked to be reset;
- "arrow", "pandas", "polars": refused. Each row would be a one-row table, which nothing can
  batch; tpufeed reads the Arrow data itself.

>>> plan_of(hf.with_format("numpy", columns=["id"]), None).columns  # doctest: +SKIP
['id']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tpufeed.errors import InvalidArgumentError

__all__ = ["FormatPlan", "plan_of"]

TYPED = (None, "numpy")  # read as Arrow, typed like Parquet rows
FRAMEWORKS = {"torch": "to_torch()", "tensorflow": "to_tf()", "jax": "to_jax()"}
TABLES = {"arrow": "pyarrow Table", "pandas": "pandas DataFrame", "polars": "polars DataFrame"}


@dataclass(frozen=True)
class FormatPlan:
    """How to read a dataset: typed (`columns`, read as Arrow) or through the dataset's own
    `__getitems__` (`own`: a transform or format settings, `columns` then picked from its rows,
    None for all); `described` names the format for fingerprints and messages."""

    own: bool
    columns: list[str] | None
    described: str


def plan_of(dataset: Any, wanted: Sequence[str] | None) -> FormatPlan:
    """How to read `dataset` as its format says, `wanted` its columns (None: what hf[i] has)."""
    fmt = dict(dataset.format)
    if fmt.get("columns") is not None and set(fmt["columns"]) >= set(dataset.column_names):
        fmt["columns"] = None  # every column: what with_format(type) alone sets
    kind, kwargs = fmt.get("type"), dict(fmt.get("format_kwargs") or {})
    described = _describe(fmt)
    if kind in FRAMEWORKS:
        raise InvalidArgumentError(
            f"from_huggingface: the dataset is formatted as {kind!r} ({described}): its rows "
            f"are {kind} tensors, made one row at a time. tpufeed batches numpy rows and hands "
            f"whole batches to {kind} itself (ds.{FRAMEWORKS[kind]}): pass "
            f"{_reset(fmt)} instead"
        )
    if kind in TABLES:
        raise InvalidArgumentError(
            f"from_huggingface: the dataset is formatted as {kind!r} ({described}): each row "
            f"would be a one-row {TABLES[kind]}, which cannot be batched. tpufeed reads the "
            f"Arrow data itself: pass {_reset(fmt)} instead"
        )
    if kind == "custom" or (kind in TYPED and kwargs):
        return FormatPlan(True, list(wanted) if wanted is not None else None, described)
    if kind not in TYPED:
        raise InvalidArgumentError(
            f"from_huggingface: the dataset's format type {kind!r} ({described}) is not one "
            f"tpufeed can read as hf[i] gives it: pass {_reset(fmt)} instead"
        )
    return FormatPlan(False, _visible(dataset, fmt, wanted), described)


def _visible(dataset: Any, fmt: dict[str, Any], wanted: Sequence[str] | None) -> list[str]:
    """The columns hf[i] has, in its order (`wanted` picks and orders among them)."""
    shown = fmt.get("columns")
    names = list(dataset.column_names)
    if shown is None or fmt.get("output_all_columns"):
        visible = [n for n in names if shown is None or n in shown]
        visible += [n for n in names if n not in visible]
    else:
        visible = [n for n in names if n in shown]
    if wanted is None:
        return visible
    missing = [name for name in wanted if name not in visible]
    if missing:
        hidden = [name for name in missing if name in names]
        why = f" (the format shows only {visible}: {_describe(fmt)})" if hidden else ""
        raise InvalidArgumentError(
            f"the dataset has no column {', '.join(map(repr, missing))}{why}"
            f"; its columns are {visible}"
        )
    return list(wanted)


def _describe(fmt: dict[str, Any]) -> str:
    """The format as the call that sets it reads."""
    kind, kwargs = fmt.get("type"), dict(fmt.get("format_kwargs") or {})
    extra = ""
    if fmt.get("columns") is not None:
        extra += f", columns={fmt['columns']!r}"
    if fmt.get("output_all_columns"):
        extra += ", output_all_columns=True"
    if kind == "custom":
        fn = kwargs.get("transform")
        name = getattr(fn, "__qualname__", type(fn).__name__)
        return f"with_transform({getattr(fn, '__module__', '?')}.{name}{extra})"
    settings = "".join(f", {key}={value!r}" for key, value in sorted(kwargs.items()))
    return f"with_format({kind!r}{extra}{settings})"


def _reset(fmt: dict[str, Any]) -> str:
    """The call that keeps the format's columns and reads the rest as tpufeed does."""
    columns = fmt.get("columns")
    keep = "" if columns is None or fmt.get("output_all_columns") else f", columns={columns!r}"
    return f"hf.with_format(None{keep})"
