"""The contract every stage implements, and the types that stages and executors share.

Record stages (`map`, `random_map`, `filter`, `flat_map`) map each element to zero or more
elements, on its own, so they run in any process on any chunk. `RecordStage.run` takes the
chunk's elements at once (the fast path is one list comprehension); when that raises it reruns
element by element to name the failing record, and in a tolerant pipeline (`ignore_errors`)
drops that element and keeps its error.

A chunk of a host's stream (`Chunk`) becomes a `Piece`: the elements it made, each tied to the
unit and output it came from, so the cursor after any element is exact. Stream stages see the
pieces in order and hand out `Item`s; an epoch's end (`EpochEnd`) closes their rows and batches.
"""

from __future__ import annotations

import abc
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from tpufeed.errors import TpufeedError
from tpufeed.observe import timeline
from tpufeed.ops.user_functions import (
    RecordNames,
    interrupted_at,
    is_interruption,
    transform_error,
)
from tpufeed.order.cursor import Cursor, at_segment_start
from tpufeed.order.rng import RecordRngs
from tpufeed.order.state import StageState


class StageClock:
    """Seconds and records per stage, accumulated; mergeable across processes."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.records: dict[str, int] = defaultdict(int)

    def add(self, stage: str, seconds: float, records: int) -> None:
        self.seconds[stage] += seconds
        self.records[stage] += records
        if timeline.recording() is not None:  # the stage's span on the timeline, too
            timeline.complete(stage, seconds, "stage", {"records": records})

    def drain(self) -> dict[str, tuple[float, int]]:
        """The times since the last drain, as a small picklable dict (what a worker ships)."""
        out = {stage: (self.seconds[stage], self.records[stage]) for stage in self.seconds}
        self.seconds.clear()
        self.records.clear()
        return out

    def merge(self, times: dict[str, tuple[float, int]]) -> None:
        """Another process's times (its spans travel on their own: `observe.shipping`)."""
        for stage, (seconds, records) in times.items():
            self.seconds[stage] += seconds
            self.records[stage] += records


now = time.perf_counter


_ID_MIX = 0x9E3779B97F4A7C15
_ID_MASK = (1 << 64) - 1


def child_id(parent: int, k: int) -> int:
    """The piece id of the k-th output of a `flat_map` on an element with id `parent` (the
    element read from the record has id 0): the same whoever computes it, and fixed per piece."""
    return ((parent * _ID_MIX) ^ (k + 1)) & _ID_MASK


@dataclass
class Elements:
    """Elements of one chunk on their way through the record stages, in order.

    `units[i]` is the unit (offset in the chunk) that `values[i]` comes from; `ids[i]` tells the
    pieces of one unit apart (None: every id is 0, as before any `flat_map`).
    """

    values: list[Any]
    units: list[int]
    ids: list[int] | None = None


@dataclass
class Context:
    """What a record stage needs besides the elements: the chunk's epoch and records, names for
    errors, the clock, and (tolerant pipelines) where the errors of dropped elements go."""

    epoch: int
    records: Sequence[int]
    names: RecordNames
    rng_seed: int
    clock: StageClock = field(default_factory=StageClock)
    skipped: list[TpufeedError] | None = None  # read and transform errors alike
    _rngs: dict[tuple[int, int], RecordRngs] = field(default_factory=dict)
    beacon: Any = None  # a watch.Beacon (options(timeout_s=...)): marks each element begun
    rows: Any = None  # the batch the last stage's outputs are stacked into (`ops.rows`), if any

    def rngs(self, stream: int, seed: int | None = None) -> RecordRngs:
        """The generators of random_map `stream`, keyed by its own `seed` (None: the
        pipeline's `rng_seed`)."""
        key = (self.rng_seed if seed is None else seed, stream)
        rngs = self._rngs.get(key)
        if rngs is None:
            rngs = self._rngs[key] = RecordRngs(*key)
        return rngs


class RecordStage(abc.ABC):
    """Base of the record stages: `fn` applied to each element. Subclasses give `kind`, the fast
    whole-list form `apply_all` and the per-element form `apply_one` (a list of outputs)."""

    kind: ClassVar[str]
    changes_count: ClassVar[bool] = False  # may an element make other than exactly one output
    splits: ClassVar[bool] = False  # are its outputs new pieces (with their own ids and rngs)
    fn: Callable[..., Any]

    @property
    def name(self) -> str:
        fn = self.fn
        return f"{self.kind}({getattr(fn, '__name__', None) or type(fn).__name__})"

    def describe(self) -> Any:
        """What the state fingerprint knows of this stage."""
        return self.kind

    @property
    def thread_safe(self) -> bool:
        """Whether `fn` says it may run on several threads at once (`fn.thread_safe = True`, as
        tpufeed's own transforms do): then the parent may split its first batch between threads."""
        return getattr(getattr(self, "fn", None), "thread_safe", False) is True

    @abc.abstractmethod
    def apply_all(self, elements: Elements, context: Context) -> Elements:
        """The stage on every element at once (the fast path; may raise on any element)."""

    @abc.abstractmethod
    def apply_one(self, value: Any, record: int, piece: int, context: Context) -> list[Any]:
        """The outputs of one element (`piece`: its id within its record)."""

    def apply_named(
        self, value: Any, record: int, piece: int, context: Context
    ) -> list[Any] | None:
        """`apply_one`, its failure named by the record: raised, or in a tolerant pipeline
        kept in `context.skipped` (None returned)."""
        try:
            return self.apply_one(value, record, piece, context)
        except BaseException as exc:  # SystemExit & co. are its failures too
            if is_interruption(exc):
                interrupted_at(exc, self.name, record, context.names)
                raise
            error = transform_error(self.name, exc, record, context.names)
            if context.skipped is None:
                raise error from exc
            context.skipped.append(error)
            return None

    def run(self, elements: Elements, context: Context, label: str) -> Elements:
        """Applies the stage to every element, timed under `label` (one at a time, each marked
        on the context's beacon, when a timeout watches the pipeline)."""
        started, count = now(), len(elements.values)
        beacon = context.beacon
        if context.skipped is None and beacon is None:
            try:
                out = self.apply_all(elements, context)
                context.clock.add(label, now() - started, count)
                return out
            except BaseException as exc:  # rerun one by one to name the record
                if is_interruption(exc):
                    interrupted_at(exc, self.name, None, context.names)
                    raise
        values: list[Any] = []
        units: list[int] = []
        ids: list[int] | None = [] if elements.ids is not None or self.splits else None
        for i, (value, unit) in enumerate(zip(elements.values, elements.units)):
            piece = elements.ids[i] if elements.ids is not None else 0
            record = context.records[unit]
            if beacon is not None:
                beacon.at(label, record)
            outs = self.apply_named(value, record, piece, context)
            if outs is None:
                continue
            for k, out in enumerate(outs):
                values.append(out)
                units.append(unit)
                if ids is not None:
                    ids.append(child_id(piece, k) if self.splits else piece)
        context.clock.add(label, now() - started, count)
        return Elements(values, units, ids)


def stage_names(stages: Sequence[RecordStage], suffix: str = "") -> list[str]:
    """Unique, readable stage names: `map(decode)`, `map(decode)#2`, ..."""
    names: list[str] = []
    for stage in stages:
        name = stage.name + suffix
        repeat = sum(1 for n in names if n == name or n.startswith(name + "#"))
        names.append(name if not repeat else f"{name}#{repeat + 1}")
    return names


@dataclass(frozen=True)
class Chunk:
    """Units [start, start + len(records)) of the host's stream in the epoch of `cursor`."""

    cursor: Cursor
    start: int
    positions: np.ndarray  # epoch position of each unit
    records: np.ndarray  # record index of each unit
    skips: np.ndarray | None = None  # outputs of each unit delivered before (None: none)

    @property
    def count(self) -> int:
        return len(self.records)


class End(abc.ABC):
    """The end of a stream of pieces: of a host's epoch (`EpochEnd`) or of a mixture. Stream
    stages close their rows and batches there."""

    dropped: int = 0  # records of a short last batch dropped unread (drop_remainder)

    @property
    @abc.abstractmethod
    def epoch(self) -> int:
        """The epoch that ends (a mixture's components have epochs of their own: 0)."""

    @property
    @abc.abstractmethod
    def whole_epoch(self) -> bool:
        """Whether the stream before it was a whole epoch from its start: if it made nothing,
        so would every repeat of it."""

    @abc.abstractmethod
    def final_cursor(self) -> Any:
        """The position once everything before this end is delivered."""


@dataclass(frozen=True)
class EpochEnd(End):
    """The end of the host's stream in the epoch of `cursor` (its start), after `units` units."""

    cursor: Cursor
    units: int
    dropped: int = 0  # records of a short last batch dropped unread (drop_remainder)

    @property
    def epoch(self) -> int:
        return self.cursor.epoch

    @property
    def whole_epoch(self) -> bool:
        return at_segment_start(self.cursor) and self.cursor.base == 0

    def final_cursor(self) -> Cursor:
        """The cursor once the whole epoch is delivered."""
        return self.cursor.after(self.units)


class PieceLike(Protocol):
    """What a stream stage reads of a piece: a chunk's `Piece`, or a mixture's."""

    payload: Any  # the elements: a list, or stacked into one batch
    size: int
    final: bool  # one finished batch, the stages after batch already run on it

    @property
    def skipped(self) -> Sequence[TpufeedError]: ...

    @property
    def epoch(self) -> int: ...

    def cursor_after(self, i: int) -> Any:
        """The position once element i (and everything before it) is delivered."""

    def record_of(self, i: int) -> int:
        """The record element i comes from (the stages after batch draw their rng from it)."""

    def refs(self) -> list[tuple[int, ...]]:
        """Names each element for a state (ints that find its record again)."""


@dataclass
class Piece:
    """The elements a chunk made, in order: a list, or stacked (batched pipelines), or one
    finished batch (`final`: the chunk was exactly one batch and its batch stages ran).

    Element i comes from unit `units[i]` of the chunk and is its output `outs[i]`, the unit's
    last when `last[i]`; None stands for the common case (element i is unit i's only output).
    """

    chunk: Chunk | None  # set by the parent (a worker's piece travels without it)
    payload: Any
    size: int
    units: list[int] | None = None
    outs: list[int] | None = None
    last: list[bool] | None = None
    skipped: list[TpufeedError] = field(default_factory=list)
    final: bool = False

    def cursor_after(self, i: int) -> Cursor:
        """The host's cursor once element i (and everything before it) is delivered."""
        chunk = self._chunk()
        unit = chunk.start + (self.units[i] if self.units is not None else i)
        if self.last is None or self.last[i]:
            return chunk.cursor.after(unit + 1)
        if self.outs is None:
            raise TpufeedError("a piece that marks last outputs must say each element's output")
        return chunk.cursor.after(unit, self.outs[i] + 1)

    @property
    def epoch(self) -> int:
        return self._chunk().cursor.epoch

    def record_of(self, i: int) -> int:
        return int(self._chunk().records[self.units[i] if self.units is not None else i])

    def refs(self) -> list[tuple[int, ...]]:
        """Names each element for a state: (epoch position, output of its record)."""
        positions = self._chunk().positions.tolist()
        if self.units is not None:
            positions = [positions[u] for u in self.units]
        outs = self.outs if self.outs is not None else [0] * len(positions)
        return list(zip(positions, outs))

    def _chunk(self) -> Chunk:
        if self.chunk is None:  # a worker's piece is placed by the parent before it is read
            raise TpufeedError("a piece's chunk is unknown until the parent sets it")
        return self.chunk


@dataclass
class Counters:
    """What a run counts besides the items it hands out (`it.stats()`)."""

    dropped_records: int = 0
    errors: int = 0
    padded_rows: int = 0  # empty rows that fill a packed epoch's last batch
    pack_tokens: int = 0  # tokens of the first packed key in the rows handed out
    pack_capacity: int = 0  # room for them in those rows


# An item on its way to the consumer: (item, cursor right after it, its first record, the
# state of the stream stage then). The stages after batch draw their rng from the record.
Item = tuple[Any, Any, int, Any]


# Every output of some records, read and transformed again: what a stream stage that holds
# elements across items restores its state from (record -> its outputs, in order).
Reread = Callable[[list[tuple[int, ...]]], dict[tuple[int, ...], list[Any]]]


class StreamStage(Protocol):
    """The running form of a stream stage: pieces in order in, items out, in the process that
    hands items to the consumer. `batch`, `pack` (with the batch after it) and the unbatched
    pass-through implement it; the stream (tpufeed.run.stream) runs any of them in one loop."""

    key: ClassVar[str]  # where a state holds what the stage held

    def push(self, piece: PieceLike) -> list[Item]:
        """The items that `piece` completes, each with the state the stage holds after it."""

    def end_epoch(self, end: End) -> list[Item]:
        """The items the stage still holds at `end` (a short last batch, the last rows)."""

    def get_state(self) -> StageState | None:
        """What the stage holds now, between items (None: nothing; a state then needs none)."""

    def set_state(self, saved: Any, reread: Reread) -> None:
        """Holds again what a saved state says it held, reading its records with `reread`."""
