"""`Dataset.element_spec`: what each item of a pipeline is (a structure of `TensorSpec`s),
learnt from the first record instead of from a run.

The source's first record is read (a codec-encoded record is decoded: one record, not a
shard). The user's functions before `pack`/`batch` (`map`, `random_map`, `flat_map`, and the
`filter`s before them) run on it, through the same code as a run; where a filter drops it or a
`flat_map` makes nothing, the next records are read (2, 4, ... at a time). `batch` stacks
`batch_size` copies of that one element and `pack` makes its (empty) rows, with their own code,
and the functions after them run once on that item. Filters that no function follows are not
run: they drop elements, and change none.

Which dimensions are known, and which are that one element's:
- `batch` adds a leading dimension of `batch_size` when every batch has it (`drop_remainder`,
  or after `pack`), `None` otherwise; after `batch`, functions that keep a leading dimension of
  `batch_size` keep it known. `pad` gives its keys the pad length (`None` over several buckets).
- `Dataset.open`'s manifest schema gives the dimensions that vary between records (`None`),
  where no function changed the records before.
- Every other dimension, and every dtype, is the first element's: such leaves say
  `sampled=True`. Where elements differ in shape, make them one shape (a `map`, `batch(pad=)`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpufeed.errors import InvalidArgumentError
from tpufeed.ops.base import Counters, RecordStage, StageClock
from tpufeed.ops.batch import Batch
from tpufeed.ops.filter import Filter
from tpufeed.ops.first_fit import write_rows
from tpufeed.ops.item_stages import ItemStages
from tpufeed.ops.pack import Packer
from tpufeed.ops.padding import pad_elements
from tpufeed.ops.stacking import stack
from tpufeed.run.chunks import ChunkRunner
from tpufeed.run.plan import MixPlan, Plan

__all__ = ["BYTES", "STR", "TensorSpec", "element_spec", "spec_of"]

logger = logging.getLogger("tpufeed")

BYTES = np.dtype("S")  # bytes of any length
STR = np.dtype("U")  # str of any length
_MOST_READ = 256  # records read at once while looking for a first element


@dataclass(frozen=True)
class TensorSpec:
    """Shape (`None` where it varies) and numpy dtype of one leaf of an item: tpufeed's own
    `tf.TensorSpec`, with no framework imported. Bytes leaves have dtype `BYTES` (`np.dtype("S")`),
    str leaves `STR` (`np.dtype("U")`), other Python objects `np.dtype(object)`. `sampled`: the
    shape and dtype are those of one element (see `tpufeed.run.element_spec`), not known from
    the pipeline or a manifest.

    >>> TensorSpec((None, 3), np.float32)
    TensorSpec(shape=(None, 3), dtype=float32)
    """

    shape: tuple[int | None, ...]
    dtype: np.dtype
    sampled: bool = False

    def __post_init__(self) -> None:
        shape = tuple(None if d is None else int(d) for d in self.shape)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", np.dtype(self.dtype))

    def __repr__(self) -> str:
        sampled = ", sampled=True" if self.sampled else ""
        return f"TensorSpec(shape={self.shape}, dtype={self.dtype.name}{sampled})"


def spec_of(tree: Any, sampled: bool = True) -> Any:
    """The `TensorSpec` structure of one item: dicts, lists, tuples and namedtuples nest (as
    the adapters walk them), anything else is a leaf."""
    if isinstance(tree, dict):
        return {k: spec_of(v, sampled) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        parts = [spec_of(v, sampled) for v in tree]
        if isinstance(tree, list):
            return parts
        return type(tree)(*parts) if hasattr(tree, "_fields") else tuple(parts)
    return _leaf(tree, sampled)


def element_spec(plan: Plan | MixPlan) -> Any:
    """The `TensorSpec` structure of the items of `plan` (see the module's docstring)."""
    first = plan if isinstance(plan, Plan) else plan.components[0]  # components agree
    head, tail = _functions(first.head, plan.tail)
    ran = [s.name for s in head] + [s.name for s in tail]
    if ran:
        logger.info("element_spec runs %s on one element to learn its output", ", ".join(ran))
    after = ItemStages(tail, plan.names, plan.rng_seed, StageClock())
    schema = getattr(first.source.source, "schema", None) if not _changes(head) else None
    for record, element in _elements(first, head):
        item = _stream_sample(plan, element, record)
        if tail:
            item = after.run(item, record, 0, [])
            if item is None:  # a filter after batch dropped it: try the next element
                continue
        return _spec(plan, element, item, schema if isinstance(plan, Plan) else None, bool(tail))
    raise InvalidArgumentError(
        f"element_spec: no record of the source's {len(first.source)} makes an item (the "
        "source is empty, or the filters drop every record), so there is none to learn it from"
    )


def _functions(
    head: tuple[RecordStage, ...], tail: tuple[RecordStage, ...]
) -> tuple[tuple[RecordStage, ...], tuple[RecordStage, ...]]:
    """The stages that must run: all but the filters no other function comes after."""
    if not _changes(tail):
        tail = ()
    if tail:
        return head, tail
    last = max((i for i, s in enumerate(head) if not isinstance(s, Filter)), default=-1)
    return head[: last + 1], tail


def _changes(stages: tuple[RecordStage, ...]) -> bool:
    return any(not isinstance(s, Filter) for s in stages)


def _elements(plan: Plan, head: tuple[RecordStage, ...]) -> Iterator[tuple[int, Any]]:
    """(record, element) for the elements `head` makes of the first records, in source order:
    one record read first, then 2, 4, ... at a time."""
    only_head = dataclasses.replace(
        plan, shuffle=None, head=head, batch=None, pack=None, tail=(), piece_size=None
    )
    runner = ChunkRunner(only_head, StageClock())
    n, start, size = len(plan.source), 0, 1
    while start < n:
        indices = np.arange(start, min(n, start + size), dtype=np.int64)
        piece = runner.run(0, indices, None)
        for i, element in enumerate(piece.payload or ()):
            yield int(indices[piece.units[i] if piece.units is not None else i]), element
        start, size = start + len(indices), min(2 * size, _MOST_READ)


def _stream_sample(plan: Plan | MixPlan, element: Any, record: int) -> Any:
    """An item as `pack` and `batch` make it, from copies of `element`."""
    batch = plan.batch
    if plan.pack is not None:
        packer = Packer(plan.pack, batch, Counters())
        dtypes = [a.dtype for a in packer._arrays(element, lambda: record)]
        rows = write_rows([], packer.keys, packer.lengths, dtypes, packer.rows_per_item)
        return rows if batch is not None else {k: v[0] for k, v in rows.items()}
    if batch is None:
        return element
    describe = lambda i: plan.names.describe(record)  # noqa: E731
    values = [element] * batch.batch_size
    if batch.pad:
        values = pad_elements(values, batch.pad, batch.cut, fixed=False, describe=describe)
    return stack(values, describe)


def _spec(plan: Plan | MixPlan, element: Any, item: Any, schema: Any, after_batch: bool) -> Any:
    """The spec of `item` with what the stages and the schema say of its dimensions."""
    batch, pack = plan.batch, plan.pack
    element_spec = _with_schema(spec_of(element), schema)
    if batch is None:
        if after_batch:
            return spec_of(item)
        return element_spec if pack is None else spec_of(item, sampled=False)
    size = batch.batch_size
    lead = size if pack is not None or batch.drop_remainder else None
    if after_batch:  # a leading dimension of batch_size is taken to be the batch's
        return _map(lambda s: _lead(s, lead) if s.shape[:1] == (size,) else s, spec_of(item))
    if pack is not None:
        return _map(lambda s: _lead(s, lead), spec_of(item, sampled=False))
    return _batched(batch, element_spec, spec_of(item), lead)


def _batched(batch: Batch, element: Any, item: Any, lead: int | None) -> Any:
    """The spec of a batch: the element's with the batch dimension in front, pad lengths."""
    pads = dict(batch.pad or ())
    out = _map(lambda s: _lead(s, lead), item)
    if not (isinstance(out, dict) and isinstance(element, dict)):
        return out
    for key, spec in out.items():
        one = element.get(key)
        if not (isinstance(one, TensorSpec) and len(spec.shape) == len(one.shape) + 1):
            one = None  # not a leaf the batch stacked: its shape stays the batch's
        if key in pads and len(spec.shape) >= 2:
            buckets = pads[key]
            padded = buckets[0] if len(buckets) == 1 else None
            rest = one.shape[1:] if one is not None else spec.shape[2:]
            sampled = one.sampled if one is not None else True
            out[key] = TensorSpec((lead, padded, *rest), spec.dtype, sampled)
        elif one is not None:
            out[key] = TensorSpec((lead, *one.shape), spec.dtype, one.sampled)
        elif key.endswith("_lengths") and key[: -len("_lengths")] in pads:
            out[key] = TensorSpec((lead,), spec.dtype, sampled=False)
    return out


def _with_schema(spec: Any, schema: Any) -> Any:
    """`spec` (of a decoded record) with the shapes of a manifest's schema, where they fit."""
    if not (isinstance(spec, dict) and isinstance(schema, dict)):
        return spec
    out = dict(spec)
    for key, leaf in spec.items():
        described = schema.get(key)
        if not isinstance(leaf, TensorSpec) or not isinstance(described, dict):
            continue
        if described.get("optional"):
            continue  # the key is missing from some records
        shape = described.get("shape", []) if described.get("type") == "ndarray" else []
        if described.get("type") in ("mixed", None) or not isinstance(shape, list):
            continue
        fits = len(shape) == len(leaf.shape) and all(
            d is None or d == s for d, s in zip(shape, leaf.shape)
        )
        if fits:
            out[key] = TensorSpec(tuple(shape), leaf.dtype, sampled=False)
    return out


def _lead(spec: TensorSpec, lead: int | None) -> TensorSpec:
    if not spec.shape:
        return spec
    return TensorSpec((lead, *spec.shape[1:]), spec.dtype, spec.sampled)


def _map(fn: Any, tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _map(fn, v) for k, v in tree.items()}
    if isinstance(tree, (tuple, list)):
        parts = [_map(fn, v) for v in tree]
        if isinstance(tree, list):
            return parts
        return type(tree)(*parts) if hasattr(tree, "_fields") else tuple(parts)
    return fn(tree)


def _leaf(value: Any, sampled: bool) -> TensorSpec:
    if isinstance(value, (bytes, str)):
        return TensorSpec((), BYTES if isinstance(value, bytes) else STR, sampled)
    try:
        array = value if isinstance(value, np.ndarray) else np.asarray(value)
    except ValueError:  # a ragged sequence: one Python object
        return TensorSpec((), np.dtype(object), sampled)
    dtype = array.dtype
    if dtype.kind in "SU":
        dtype = np.dtype(dtype.kind)
    elif dtype.kind == "O":
        kinds = {type(v) for v in array.flat}
        dtype = BYTES if kinds == {bytes} else STR if kinds == {str} else dtype
    return TensorSpec(array.shape, dtype, sampled)
