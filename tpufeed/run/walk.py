"""The walk over a host's stream: which records to read next, chunk by chunk, epoch by epoch.

Every executor (in-process, workers, autotune warm-up) takes its chunks from `walk`, so the
records a host reads are decided in one place. Record indices are computed many blocks at a
time (a span: ~150 ns a record instead of ~2 µs for a small slice; the shuffle's cycle-walking
costs per call, not per record), and each block is announced to the source
(`SourceView.will_read`) one block before it is needed, so a source that fetches remote shards
downloads them in the order the plan will read them, ahead of the reads.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from tpufeed.ops.base import Chunk, EpochEnd
from tpufeed.order.cursor import Cursor, epoch_start
from tpufeed.run.plan import Plan

_BLOCK = 8192  # units announced to the source at once
_SPAN_BLOCKS = 8  # blocks whose records are computed at once


def walk(plan: Plan, cursor: Cursor, announce: bool = True) -> Iterator[Chunk | EpochEnd]:
    """Chunks of `plan.chunk` units from `cursor` on, and an `EpochEnd` after each epoch."""
    n = plan.records_per_epoch
    fused_drop = plan.fused and plan.batch is not None and plan.batch.drop_remainder
    while plan.epochs is None or cursor.epoch < plan.epochs:
        units = cursor.stream_size(n)
        blocks = _Blocks(plan, cursor, n, units, announce)
        k, dropped = cursor.consumed, 0
        while k < units:
            count = min(plan.chunk, units - k)
            if fused_drop and count < plan.chunk:
                dropped = count  # a short last batch that would be dropped: never read
                break
            positions, records, skips = blocks.get(k, count)
            yield Chunk(cursor, k, positions, records, skips)
            k += count
        yield EpochEnd(cursor, units, dropped)
        cursor = epoch_start(cursor.epoch + 1, plan.hosts, plan.host)


class _Blocks:
    """Positions, record indices and outputs to skip of one epoch's units, a block at a time."""

    def __init__(self, plan: Plan, cursor: Cursor, n: int, units: int, announce: bool):
        self._plan, self._cursor, self._n, self._units = plan, cursor, n, units
        self._announce = announce
        self._start = 0
        self._block: _Block = (np.empty(0, np.int64), np.empty(0, np.int64), None)
        self._next: tuple[int, _Block] | None = None
        self._span_start = 0
        self._span: _Block = (np.empty(0, np.int64), np.empty(0, np.int64), None)

    def get(self, start: int, count: int) -> _Block:
        end = start + count
        if not (self._start <= start and end <= self._start + len(self._block[0])):
            if self._next is not None and self._next[0] == start and len(self._next[1][0]) >= count:
                self._start, self._block = self._next
            else:
                self._start, self._block = start, self._compute(start, count)
            after = self._start + len(self._block[0])
            self._next = (after, self._compute(after, count)) if after < self._units else None
        lo, hi = start - self._start, end - self._start
        positions, records, skips = self._block
        skips = None if skips is None or not skips[lo:hi].any() else skips[lo:hi]
        return positions[lo:hi], records[lo:hi], skips

    def _compute(self, start: int, count: int) -> _Block:
        # Blocks are whole chunks, so consecutive chunks never straddle two blocks.
        block = max(count, _BLOCK // count * count)
        size = min(block, self._units - start)
        lo = start - self._span_start
        if not (0 <= lo and lo + size <= len(self._span[0])):  # spans are whole blocks too
            span = min(block * _SPAN_BLOCKS, self._units - start)
            at, skipping = self._cursor.positions(self._n, start, span)
            records = self._plan.records_at(self._cursor.epoch, at)
            self._span_start, lo, self._span = start, 0, (at, records, skipping)
        at, records, skipping = self._span
        positions, records = at[lo : lo + size], records[lo : lo + size]
        skips = None if skipping is None else skipping[lo : lo + size]
        if self._announce:
            self._plan.source.will_read(records)
        return positions, records, skips


_Block = tuple[np.ndarray, np.ndarray, "np.ndarray | None"]  # positions, records, skips
