"""The unit of work: a chunk of a host's stream, read and run through the record stages.

`ChunkRunner.run` is the one piece of code that reads records and applies `map`, `random_map`,
`filter` and `flat_map`: worker processes run it, the parent runs it (alone, or while workers
start), and the autotune warm-up runs it. Its `Piece` says which unit (and which of the unit's
outputs) each element comes from, so the consumer's cursor can be exact after any element.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tpufeed.errors import SourceError, TpufeedError
from tpufeed.ops.base import (
    Chunk,
    Context,
    Elements,
    Piece,
    RecordStage,
    Reread,
    StageClock,
    now,
    stage_names,
)
from tpufeed.ops.batch import Batch
from tpufeed.ops.cache import Cache
from tpufeed.ops.item_stages import ItemStages
from tpufeed.ops.padding import pad_elements
from tpufeed.ops.rows import StackedRows
from tpufeed.ops.stacking import stack
from tpufeed.ops.user_functions import is_interruption
from tpufeed.order.rng import RecordRngs
from tpufeed.run.plan import Plan
from tpufeed.run.threaded import head_in_threads, threadable
from tpufeed.sources.view import SourceView

Stacker = Callable[[list[Any], Callable[[int], str]], Any]  # (elements, describe) -> batch
Placer = Callable[[Any], Any]  # an already stacked batch -> where it lives
# (rows, describe) -> a batch stacked as its elements are made (`StackedRows`): .add(element),
# .count and .result(), the payload
RowsFor = Callable[[int, Callable[[int], str]], Any]


def read(
    source: SourceView,
    indices: np.ndarray,
    clock: StageClock,
    skipped: list[TpufeedError] | None = None,
) -> tuple[list[Any], list[int]]:
    """Reads a chunk of records, timed as the "read" stage: (records, their units).

    With `skipped` (a tolerant pipeline), a failing chunk is re-read record by record and the
    records that fail are left out, their errors appended to `skipped`.
    """
    started = now()
    try:
        records, units = source.read(indices), list(range(len(indices)))
    except SourceError:
        if skipped is None:
            raise
        records, units = [], []
        for unit in range(len(indices)):
            try:
                records += source.read(indices[unit : unit + 1])
            except SourceError as error:
                skipped.append(error)
                continue
            units.append(unit)
    clock.add("read", now() - started, len(indices))
    return records, units


class ChunkRunner:
    """Runs chunks of one plan: read, record stages, and (batched pipelines) stacking.

    `stacker` stacks a list of elements where the batch should live (a worker: straight into a
    shared-memory slot); `placer` moves an already stacked batch there. Where a chunk is one
    batch and its last record stage makes one element of each (`by_rows`), `rows_for` takes
    each element as that stage makes it, so that it is stacked while still in the cache.
    """

    def __init__(self, plan: Plan, clock: StageClock, beacon: Any = None):
        self.plan, self.clock, self.beacon = plan, clock, beacon
        self.labels = stage_names(plan.head)
        self.splits = any(stage.splits for stage in plan.head)
        caches = [(i, s) for i, s in enumerate(plan.head) if isinstance(s, Cache)]
        self.cache: tuple[int, Cache] | None = caches[0] if caches else None
        self.tolerant = plan.max_errors > 0
        self.after_batch = ItemStages(
            plan.tail, plan.source, plan.rng_seed, clock, self.tolerant, beacon
        )
        self._rngs: dict[tuple[int, int], RecordRngs] = {}
        last = plan.head[-1] if plan.head else None
        self.by_rows = (
            plan.batch is not None
            and plan.pack is None
            and plan.fused
            and not plan.tail
            and not plan.batch.pad
            and not self.splits
            and last is not None
            and not last.changes_count
            and not isinstance(last, Cache)
        )
        # The parent's first batch may run its stages before the last on several threads.
        self.threadable = (
            self.by_rows
            and not self.tolerant
            and self.cache is None
            and beacon is None
            and threadable(plan.head[:-1])
        )

    def context(self, epoch: int, records: list[int]) -> Context:
        return Context(
            epoch,
            records,
            self.plan.source,
            self.plan.rng_seed,
            self.clock,
            [] if self.tolerant else None,
            self._rngs,
            self.beacon,
        )

    def outputs(self, epoch: int, positions: list[int]) -> dict[int, list[Any]]:
        """Every output of the records at epoch `positions`, read and transformed again (what
        a stage that holds elements across items restores from)."""
        records = self.plan.records_at(epoch, np.asarray(positions, np.int64))
        piece = self.run(epoch, records, None)
        if piece.skipped:
            raise piece.skipped[0]
        found: dict[int, list[Any]] = {p: [] for p in positions}
        for i, element in enumerate(piece.payload):
            found[positions[piece.units[i] if piece.units is not None else i]].append(element)
        return found

    def run_chunk(self, chunk: Chunk, threads: int = 1) -> Piece:
        """The piece of `chunk`, made in this process; with `threads` > 1, its stages before
        the last run on that many threads where they allow it (`run.threaded`)."""
        piece = None
        if threads > 1 and self.threadable and chunk.skips is None and chunk.count >= 2 * threads:
            try:
                piece = self._in_threads(chunk, threads)
            except BaseException as exc:  # run again on one thread, below
                if is_interruption(exc):
                    raise
        if piece is None:  # one thread; also raises a failure as one thread meets it first
            piece = self.run(
                chunk.cursor.epoch, chunk.records, chunk.skips, rows_for=StackedRows.in_memory
            )
        piece.chunk = chunk
        return piece

    def _in_threads(self, chunk: Chunk, threads: int) -> Piece:
        indices = chunk.records
        context = self.context(chunk.cursor.epoch, indices.tolist())

        def read_part(start: int, end: int) -> Elements:
            values, units = read(self.plan.source, indices[start:end], self.clock)
            return Elements(values, [start + unit for unit in units])

        head, labels = self.plan.head[:-1], self.labels[:-1]
        elements = head_in_threads(read_part, len(indices), head, labels, context, threads)
        return self._by_rows(indices, context, StackedRows.in_memory, elements)

    def run(
        self,
        epoch: int,
        indices: np.ndarray,
        skips: np.ndarray | None,
        stacker: Stacker = stack,
        placer: Placer = lambda batch: batch,
        rows_for: RowsFor | None = None,
    ) -> Piece:
        """The piece made from records `indices` of `epoch` (`skips`: outputs of each unit to
        leave out, as delivered before)."""
        plan, beacon = self.plan, self.beacon
        records = indices.tolist()
        context = self.context(epoch, records)
        if beacon is not None and records:
            beacon.at("read", records[0])
        if rows_for is not None and skips is None and self.by_rows and records:
            return self._by_rows(indices, context, rows_for)
        elements = self._head(indices, context)
        piece = Piece(None, None, 0, skipped=context.skipped or [])
        if self.splits or skips is not None:
            elements, piece.outs, piece.last = _outputs(elements, skips)
        values = elements.values
        piece.size = len(values)
        if piece.outs is not None or len(values) != len(records):
            piece.units = elements.units
        if plan.batch is None or plan.pack is not None:
            piece.payload = values  # elements: unbatched, or packed in order by the parent
        elif values:
            piece.payload = self._stack(
                plan.batch, values, records, elements.units, epoch, piece.skipped, stacker, placer
            )
            piece.final = plan.fused
        if beacon is not None:
            beacon.idle()
        return piece

    def _by_rows(
        self,
        indices: np.ndarray,
        context: Context,
        rows_for: RowsFor,
        elements: Elements | None = None,
    ) -> Piece:
        """The piece of a chunk that is one batch, its last record stage run one element at a
        time and each result handed to `rows_for`'s writer at once (timed as "batch"), or,
        where the first result says the batch is small (`StackedRows.listed`), the rest run
        as a list and handed over at once. `elements`: the outputs of the stages before the
        last, where already made."""
        if elements is None:
            elements = self._head(indices, context, end=-1)
        records, beacon = context.records, self.beacon
        units: list[int] = []
        rows = rows_for(
            len(elements.values), lambda i: self.plan.source.describe(records[units[i]])
        )
        context.rows = rows  # where the stage may write its output in place
        stacking = self._last_stage(elements, context, rows, units)
        piece = Piece(None, None, rows.count, skipped=context.skipped or [])
        if rows.count != len(records):
            piece.units = units
        if rows.count:
            made = now()
            piece.payload, piece.final = rows.result(), True
            stacking += now() - made
        self.clock.add("batch", stacking, rows.count)
        if beacon is not None:
            beacon.idle()
        return piece

    def _last_stage(
        self, elements: Elements, context: Context, rows: Any, units: list[int]
    ) -> float:
        """Runs the last record stage on `elements` into `rows` (the unit of each output
        appended to `units`): one at a time while the rows are written as made, then, once
        they are `listed`, over the rest at once. Returns the seconds spent stacking."""
        stage, label = self.plan.head[-1], self.labels[-1]
        records, beacon = context.records, self.beacon
        started = now()
        stacking = 0.0
        done = 0
        for value, unit in zip(elements.values, elements.units):
            if beacon is not None:
                beacon.at(label, records[unit])
            outs = stage.apply_named(value, records[unit], 0, context)
            made = now()
            for out in outs or ():
                units.append(unit)
                rows.add(out)
            stacking += now() - made
            done += 1
            if rows.listed:
                break
        self.clock.add(label, now() - started - stacking, done)
        if done < len(elements.values):  # the rest as a list (timed by the stage itself)
            context.rows = None
            rest = stage.run(
                Elements(elements.values[done:], elements.units[done:]), context, label
            )
            units += rest.units
            made = now()
            rows.extend(rest.values)
            stacking += now() - made
        return stacking

    def _head(self, indices: np.ndarray, context: Context, end: int | None = None) -> Elements:
        """Reads the records and runs the stages before batch (before `end`); a `cache()`
        among them replays what it stored, reading and running the stages before it only for
        the other records."""
        head, labels = self.plan.head[:end], self.labels[:end]
        if self.cache is None:
            values, units = read(self.plan.source, indices, self.clock, context.skipped)
            return _through(Elements(values, units), head, labels, context)
        at, cache = self.cache

        def make(units: list[int]) -> Elements:
            values, got = read(self.plan.source, indices[units], self.clock, context.skipped)
            made = Elements(values, [units[u] for u in got])
            return _through(made, head[:at], labels[:at], context)

        elements = cache.replay(context, labels[at], make)
        return _through(elements, head[at + 1 :], labels[at + 1 :], context)

    def _stack(
        self,
        batch: Batch,
        values: list[Any],
        records: list[int],
        units: list[int],
        epoch: int,
        skipped: list[TpufeedError],
        stacker: Stacker,
        placer: Placer,
    ) -> Any:
        """The survivors of a chunk stacked: a piece for the stream stage to cut batches from,
        or (a fused plan) the whole batch, with the stages after batch run on it."""
        plan = self.plan
        describe = lambda i: plan.source.describe(records[units[i]])  # noqa: E731
        if batch.pad:  # to each key's bucket if this is the batch, else the longest
            values = pad_elements(
                values, batch.pad, batch.cut, fixed=not plan.fused, describe=describe
            )
        started = now()
        if self.beacon is not None:
            self.beacon.at("batch", records[0])
        if not (plan.fused and plan.tail):
            stacked = stacker(values, describe)
            self.clock.add("batch", now() - started, len(values))
            return stacked
        whole = stack(values, describe)
        self.clock.add("batch", now() - started, len(values))
        whole = self.after_batch.run(whole, records[0], epoch, skipped)
        return placer(whole) if whole is not None else None


def _through(
    elements: Elements, stages: Sequence[RecordStage], labels: list[str], context: Context
) -> Elements:
    for stage, label in zip(stages, labels):
        elements = stage.run(elements, context, label)
    return elements


def reread(plan: Plan, epoch: int, clock: StageClock) -> Reread:
    """Reads the outputs of records named by their epoch position in `epoch` again."""
    runner = ChunkRunner(plan, clock)

    def outputs(records: list[tuple[int, ...]]) -> dict[tuple[int, ...], list[Any]]:
        found = runner.outputs(epoch, [r[0] for r in records])
        return {(position,): outs for position, outs in found.items()}

    return outputs


def _outputs(
    elements: Elements, skips: np.ndarray | None
) -> tuple[Elements, list[int], list[bool]]:
    """Numbers each element within its unit's outputs and marks each unit's last; drops the
    outputs a unit delivered before (`skips`)."""
    units = elements.units
    outs, last = [], []
    previous, k = -1, 0
    for i, unit in enumerate(units):
        k = k + 1 if unit == previous else 0
        previous = unit
        outs.append(k)
        last.append(i + 1 == len(units) or units[i + 1] != unit)
    if skips is not None:
        keep = [i for i, (unit, out) in enumerate(zip(units, outs)) if out >= skips[unit]]
        elements = Elements(
            [elements.values[i] for i in keep],
            [units[i] for i in keep],
            None if elements.ids is None else [elements.ids[i] for i in keep],
        )
        outs, last = [outs[i] for i in keep], [last[i] for i in keep]
    return elements, outs, last


# A piece the `auto` warm-up made, with its stage times and records (`StageClock.drain()`).
WarmPiece = tuple[Piece, dict[str, tuple[float, int]]]


class WarmPieces:
    """Pieces already made for the first chunks of a walk (by the `auto` warm-up), handed out
    in order, each only for the chunk it was made from; past the first mismatch, none. Each
    comes with the stage times and records it took, which go to `clock` (the run's) as it is
    taken: the run's stage counts hold every piece it hands out, wherever it was made."""

    def __init__(
        self,
        pieces: tuple[WarmPiece, ...] = (),
        clock: StageClock | None = None,
    ):
        self._pieces = list(pieces)[::-1]
        self._clock = clock

    def take(self, chunk: Chunk) -> Piece | None:
        if not self._pieces:
            return None
        piece, times = self._pieces[-1]
        made = piece.chunk
        if made is None or made.start != chunk.start or made.cursor != chunk.cursor:
            self._pieces.clear()
            return None
        self._pieces.pop()
        if self._clock is not None:
            self._clock.merge(times)
        return piece
