"""`ds[i]`: the element at position `i` of a pipeline's stream, made without iterating to it.

Grain's `MapDataset` can be indexed, and so can a tpufeed pipeline whose stages make at most one
element from each record: `map`, `random_map` and `filter`. Position `i` of this host's stream
is position `i % share` of epoch `i // share` (`share`: this host's records per epoch), so
indices past the first epoch are the next epochs', each with its own permutation when shuffled,
as far as the pipeline's epochs go (`repeat`). The record there is read and run through the
stages by the code iteration runs (`ChunkRunner`), so `ds[i]` is what iteration makes at that
position, `random_map`'s rng (from seed, epoch and record) included. Where a `filter` drops the
record, `ds[i]` is None, as in Grain: the elements that are not None, in index order, are what
iteration gives. A record that `ignore_errors` would skip raises its error here.

>>> ds = tpufeed.Dataset.from_sequence(range(10)).filter(lambda x: x % 3)  # doctest: +SKIP
>>> ds[1], ds[3]                                                            # doctest: +SKIP
(1, None)
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from tpufeed.ops.base import StageClock
from tpufeed.order.cursor import epoch_start
from tpufeed.run.chunks import ChunkRunner
from tpufeed.run.plan import MixPlan, Plan

__all__ = ["element_at"]


def element_at(plan: Plan | MixPlan, index: Any) -> Any:
    """The element at stream position `index` of `plan` (None where a filter drops it);
    TypeError where the pipeline cannot be indexed, IndexError past its last position."""
    plan = _indexable(plan)
    try:
        i = operator.index(index)
    except TypeError:
        raise TypeError(
            f"Dataset indices are ints, got {type(index).__name__} {index!r}: for a share of "
            "the records use .shard(index, count), for a range itertools.islice(ds, start, stop)"
        ) from None
    n = plan.records_per_epoch
    share = plan.start().stream_size(n)
    positions = None if plan.epochs is None else share * plan.epochs
    if i < 0 and positions is not None:
        i += positions
    if i < 0 or not share or (positions is not None and i >= positions):
        raise IndexError(
            f"Dataset index {index} is out of range: this host's stream has "
            f"{'no end' if positions is None else positions} positions "
            f"({share} per epoch, {'forever' if plan.epochs is None else plan.epochs} epochs)"
        )
    epoch, unit = divmod(i, share)
    stream, _ = epoch_start(epoch, plan.hosts, plan.host).positions(n, unit, 1)
    records = plan.records_at(epoch, np.asarray(stream, np.int64))
    piece = ChunkRunner(plan, StageClock()).run(epoch, records, None)
    if piece.skipped:
        raise piece.skipped[0]
    return piece.payload[0] if piece.payload else None


def _indexable(plan: Plan | MixPlan) -> Plan:
    """`plan`, where each record makes at most one element, at a position of its own; else
    a TypeError saying why and what to use."""
    if isinstance(plan, MixPlan):
        raise TypeError(
            "a mixture cannot be indexed: which component each position takes depends on how "
            "many elements the components made before it. Index a component, or iterate"
        )
    splits = any(stage.splits for stage in plan.head)
    reasons = [
        reason
        for reason, present in (
            ("flat_map makes any number of elements from one record", splits),
            ("pack fills each row from several elements", plan.pack is not None),
            ("batch stacks several elements into one item", plan.batch is not None),
        )
        if present
    ]
    if reasons:
        raise TypeError(
            f"this Dataset cannot be indexed: {reasons[0]}, so its items have no position of "
            f"their own. Index the Dataset before {reasons[0].split()[0]} (ds[i] works on map, "
            "random_map and filter), or iterate (itertools.islice(ds, i, None))"
        )
    return plan
