"""The runnable form of a Dataset: a picklable plan, and the producer that walks it.

`produce` yields (item, cursor after item). The cursor counts *positions* of the host's share,
so a batch that needed more positions because of a filter still resumes exactly after it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tpufeed.batching import stack
from tpufeed.errors import SourceError, TpufeedError
from tpufeed.order import Cursor, Shuffle, record_indices, share_size
from tpufeed.sources.view import SourceView
from tpufeed.stages import BatchOp, ElementOp, ElementStage
from tpufeed.stats import StageClock, now

_INDEX_BLOCK = 8192  # positions permuted at once: ~80 ns/record instead of ~2 µs for 256


@dataclass(frozen=True)
class Plan:
    source: SourceView
    shuffle: Shuffle | None
    rng_seed: int
    element_ops: tuple[ElementOp, ...]
    batch: BatchOp | None
    batch_ops: tuple[ElementOp, ...]
    epochs: int | None
    hosts: int
    host: int
    fingerprint: str
    max_errors: int = 0  # bad records that may be skipped (0: the first one raises)

    @property
    def chunk(self) -> int:
        """Positions read and transformed in one call."""
        return self.batch.batch_size if self.batch is not None else 64


_log = logging.getLogger("tpufeed")


def read(source: SourceView, indices: np.ndarray, clock: StageClock,
         skipped: list[TpufeedError] | None = None) -> tuple[list[Any], list[int] | None]:
    """Reads a chunk of records, timed as the "read" stage: (records, their offsets or None).

    With `skipped` (a tolerant pipeline), a failing chunk is re-read record by record and the
    records that fail are left out, their errors appended to `skipped`.
    """
    started = now()
    try:
        records, offsets = source.read(indices), None
    except SourceError:
        if skipped is None:
            raise
        records, offsets = [], []
        for offset in range(len(indices)):
            try:
                records += source.read(indices[offset:offset + 1])
            except SourceError as error:
                skipped.append(error)
                continue
            offsets.append(offset)
    clock.add("read", now() - started, len(indices))
    return records, offsets


@dataclass
class ErrorBudget:
    """Counts skipped bad records against `ignore_errors(max_errors)`; past it, raises."""

    max_errors: int
    counters: Counters

    def charge(self, errors: Sequence[TpufeedError]) -> None:
        for error in errors:
            self.counters.errors += 1
            if self.counters.errors > self.max_errors:
                error.add_note(f"tpufeed: ignore_errors({self.max_errors}) skips at most "
                               f"{self.max_errors} bad records; this was bad record "
                               f"{self.counters.errors}")
                raise error
            _log.warning("tpufeed: skipped a bad record (%d of at most %d): %s",
                         self.counters.errors, self.max_errors, str(error).split("\n", 1)[0])


@dataclass
class Counters:
    dropped_records: int = 0
    errors: int = 0


class IndexBlocks:
    """Record indices of one host's share of one epoch, computed a block at a time.

    Each block is announced to the source (`SourceView.will_read`) one block before it is
    needed, so a source that fetches remote shards downloads them in the order the plan will
    read them, ahead of the reads.
    """

    def __init__(self, n: int, shuffle: Shuffle | None, cursor: Cursor,
                 source: SourceView | None = None):
        self._n, self._shuffle, self._cursor, self._source = n, shuffle, cursor, source
        self._share = share_size(n, cursor.base, cursor.host, cursor.hosts)
        self._start, self._block = 0, np.empty(0, np.int64)
        self._next: tuple[int, np.ndarray] | None = None

    def get(self, start: int, count: int) -> np.ndarray:
        end = start + count
        if not (self._start <= start and end <= self._start + len(self._block)):
            if self._next is not None and self._next[0] == start and len(self._next[1]) >= count:
                self._start, self._block = self._next
            else:
                self._start, self._block = start, self._compute(start, count)
            after = self._start + len(self._block)
            self._next = (after, self._compute(after, count)) if after < self._share else None
        return self._block[start - self._start:end - self._start]

    def _compute(self, start: int, count: int) -> np.ndarray:
        # Blocks are whole chunks, so consecutive chunks never straddle two blocks.
        size = min(max(count, _INDEX_BLOCK // count * count), self._share - start)
        block = record_indices(self._n, self._shuffle, self._cursor, start, size)
        if self._source is not None:
            self._source.will_read(block)
        return block


@dataclass
class Producer:
    """Walks a plan from a cursor; `items()` yields (item, cursor after it)."""

    plan: Plan
    cursor: Cursor
    counters: Counters = field(default_factory=Counters)
    clock: StageClock = field(default_factory=StageClock)

    def items(self) -> Iterator[tuple[Any, Cursor]]:
        plan, cursor = self.plan, self.cursor
        n = len(plan.source)
        tolerant = plan.max_errors > 0
        stage = ElementStage(plan.element_ops, plan.rng_seed, plan.source, self.clock,
                             tolerant=tolerant)
        batch_stage = ElementStage(plan.batch_ops, plan.rng_seed, plan.source, self.clock,
                                   on_batches=True, tolerant=tolerant)
        self._budget = ErrorBudget(plan.max_errors, self.counters)
        while plan.epochs is None or cursor.epoch < plan.epochs:
            yielded = False
            for item, after in self._epoch(n, cursor, stage, batch_stage):
                yielded = True
                yield item, after
            if not yielded and plan.epochs is None and cursor.consumed == 0 and cursor.base == 0:
                raise TpufeedError(
                    f"epoch {cursor.epoch} produced nothing for host {cursor.host} of {cursor.hosts} "
                    f"({n} records; a filter may drop them all), so repeat() would loop forever")
            cursor = Cursor(cursor.epoch + 1, 0, plan.hosts, plan.host, 0)

    def _epoch(self, n: int, cursor: Cursor, stage: ElementStage,
               batch_stage: ElementStage) -> Iterator[tuple[Any, Cursor]]:
        plan = self.plan
        share = share_size(n, cursor.base, cursor.host, cursor.hosts)
        blocks = IndexBlocks(n, plan.shuffle, cursor, plan.source)
        pending: list[Any] = []
        pending_records: list[int] = []
        k = cursor.consumed
        while k < share:
            count = min(plan.chunk, share - k)
            indices = blocks.get(k, count)
            records = indices.tolist()
            chunk, offsets = read(plan.source, indices, self.clock, stage.skipped if stage.tolerant else None)
            elements, offsets = stage.run(chunk, records, cursor.epoch, offsets)
            if stage.skipped:
                self._budget.charge(stage.skipped)
                stage.skipped.clear()
            if plan.batch is None:
                for element, offset in zip(elements, offsets):
                    yield element, replace(cursor, consumed=k + offset + 1)
            elif not pending and len(elements) == count == plan.batch.batch_size:
                # The common case: every record of the chunk survived and they make one batch.
                for batch in self._finish(elements, records, cursor.epoch, batch_stage):
                    yield batch, replace(cursor, consumed=k + count)
            else:
                size = plan.batch.batch_size
                for element, offset in zip(elements, offsets):
                    pending.append(element)
                    pending_records.append(records[offset])
                    if len(pending) == size:
                        for batch in self._finish(pending, pending_records, cursor.epoch, batch_stage):
                            yield batch, replace(cursor, consumed=k + offset + 1)
                        pending, pending_records = [], []
            k += count
        if pending:
            if plan.batch is not None and plan.batch.drop_remainder:
                self.counters.dropped_records += len(pending)
            else:
                for batch in self._finish(pending, pending_records, cursor.epoch, batch_stage):
                    yield batch, replace(cursor, consumed=share)

    def _finish(self, elements: list[Any], records: list[int], epoch: int,
                batch_stage: ElementStage) -> list[Any]:
        names = self.plan.source
        started = now()
        batch = stack(elements, lambda i: names.describe(records[i]))
        self.clock.add("batch", now() - started, len(elements))
        if not batch_stage.ops:
            return [batch]
        out, _ = batch_stage.run([batch], records[:1], epoch)
        if batch_stage.skipped:
            self._budget.charge(batch_stage.skipped)
            batch_stage.skipped.clear()
        return out
