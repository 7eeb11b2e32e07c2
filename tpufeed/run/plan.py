"""Plans: the runnable, picklable form of a Dataset (as workers receive it), and of a mixture.

A `Plan` is one pipeline: its source, order, stages and host. A `MixPlan` is a mixture: the
plans of its components and the stages after `mix`. Both give what `StreamPlan` declares, which
is all that the stream, the stages after batch, the resume door and the run ask of a plan.

`pipeline_plan` makes a `Plan` of what a `Dataset` holds, for one host (`tpufeed.chain` checks
the settings as they are chained).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from tpufeed.errors import UnknownLengthError
from tpufeed.ops.base import RecordNames, RecordStage
from tpufeed.ops.batch import Batch
from tpufeed.ops.mix import Mix
from tpufeed.ops.pack import Pack
from tpufeed.ops.registry import Stage, idle_stage_state, split
from tpufeed.order.cursor import Cursor, MixCursor, epoch_start, mixture_start
from tpufeed.order.permutation import Shuffle
from tpufeed.order.slicing import WHOLE, Slicing
from tpufeed.order.state import (
    ShardStamp,
    StageState,
    cursor_from_state,
    mix_cursor_from_state,
    mix_state_to_dict,
    shards_seen,
    state_to_dict,
)
from tpufeed.run.identity import pipeline_fingerprint as pipeline_fingerprint  # dataset.py's
from tpufeed.run.identity import pipeline_parts, stage_names
from tpufeed.sources.view import SourceView

_UNBATCHED_CHUNK = 64  # units per chunk when nothing batches
_PACKED_CHUNK = 256  # units per chunk feeding pack: fewer, larger hand-offs to the parent
_MIX_PIECE = 256  # units per component chunk when the mixture does not batch

Stages = dict[str, StageState]  # what the stream stages hold, by state key


class StreamPlan(Protocol):
    """What every plan declares: the stream stages and the stages after them, how errors are
    counted and named, and how its positions are written into a state and read back. Plans
    are frozen: every member is read-only."""

    @property
    def fingerprint(self) -> str: ...

    @property
    def hosts(self) -> int: ...

    @property
    def host(self) -> int: ...

    @property
    def epochs(self) -> int | None:
        """Epochs to run (None: forever)."""

    @property
    def max_errors(self) -> int:
        """Bad records that may be skipped (0: the first one raises)."""

    @property
    def pack(self) -> Pack | None: ...

    @property
    def batch(self) -> Batch | None: ...

    @property
    def tail(self) -> tuple[RecordStage, ...]:
        """The record stages after pack and batch, on whole items."""

    @property
    def rng_seed(self) -> int: ...

    @property
    def names(self) -> RecordNames:
        """Names records in errors."""

    @property
    def record_key(self) -> int:
        """Ints that name a record in a state (pack's refs are these, then output and piece)."""

    @property
    def counts_depend_on_data(self) -> bool: ...

    @property
    def fused(self) -> bool: ...

    @property
    def records_per_epoch(self) -> int: ...

    @property
    def shard_stamps(self) -> tuple[ShardStamp, ...]:
        """The files read, as a state remembers them (`tpufeed.order.state.check_shards`)."""

    def start(self) -> Any:
        """The position before the first item."""

    def state_of(self, position: Any, stages: Stages | None) -> dict[str, Any]:
        """The iterator state at `position`, with what the stream stages hold then."""

    def position_from(self, state: dict[str, Any]) -> Any:
        """The position a state describes (its header already checked)."""


@dataclass(frozen=True)
class Plan:
    """Source, order, stages and host of a pipeline.

    `head` are the record stages before `pack` and `batch`, `tail` those after them (on
    whole items).
    """

    source: SourceView
    shuffle: Shuffle | None
    rng_seed: int
    head: tuple[RecordStage, ...]
    batch: Batch | None
    tail: tuple[RecordStage, ...]
    epochs: int | None
    hosts: int
    host: int
    fingerprint: str
    max_errors: int = 0  # bad records that may be skipped (0: the first one raises)
    pack: Pack | None = None
    pieces_only: bool = False  # a mixture's component: stacks pieces, never finishes batches
    piece_size: int | None = None  # a mixture's component: units per chunk
    shard_stamps: tuple[ShardStamp, ...] = ()  # the source's files when the plan was made
    slicing: Slicing = WHOLE  # the records and positions each epoch reads (slice, take)
    parts: str = ""  # what a refused state is compared by (`tpufeed.order.pipeline_parts`)
    part_names: tuple[str, ...] = ()  # the stages `parts` describes, by name

    record_key = 1  # ints that name a record in a state: its epoch position

    @property
    def counts_depend_on_data(self) -> bool:
        """Whether the items a host makes from its share can depend on the records' contents
        (a filter, flat_map, pack or skipped bad records). If not, hosts with equal shares stay in
        lockstep, and one host's state tells where every host stands. The one answer that the
        workers, elastic resume and the device adapters all use."""
        return (
            self.max_errors > 0
            or self.pack is not None
            or any(stage.changes_count for stage in self.head + self.tail)
        )

    @property
    def fused(self) -> bool:
        """Whether each chunk is exactly one batch (so workers finish whole batches)."""
        return self.batch is not None and not self.counts_depend_on_data and not self.pieces_only

    @property
    def names(self) -> SourceView:
        return self.source

    @functools.cached_property
    def records_per_epoch(self) -> int:
        """Positions in each epoch: the source's records, or those a slice keeps."""
        return self.slicing.count(len(self.source))

    def records_at(self, epoch: int, positions: np.ndarray) -> np.ndarray:
        """The record indices at `positions` of `epoch`'s order."""
        return self.slicing.records_at(len(self.source), self.shuffle, epoch, positions)

    @property
    def chunk(self) -> int:
        """Units read and transformed in one call."""
        if self.piece_size is not None:
            return self.piece_size
        if self.pack is not None:
            return _PACKED_CHUNK
        if self.batch is None:
            return _UNBATCHED_CHUNK
        return self.batch.batch_size

    def items_per_epoch(self) -> int:
        """Items (batches, or elements) in one epoch of this host's share, from the record
        count alone: exact only where counts cannot depend on the data."""
        share = self.start().stream_size(self.records_per_epoch)
        if self.batch is None:
            return share
        size = self.batch.batch_size
        return share // size if self.batch.drop_remainder else -(-share // size)

    def start(self) -> Cursor:
        return epoch_start(0, self.hosts, self.host)

    @functools.cached_property
    def shards(self) -> list[Any] | None:
        """What every state of this plan says of its files (`shards_seen`), worked out once."""
        return shards_seen(self.shard_stamps)

    def state_of(self, position: Cursor, stages: Stages | None) -> dict[str, Any]:
        held = stages or idle_stage_state(self.pack)  # the same keys at every step
        return state_to_dict(position, self.fingerprint, held, self.shards, self.parts)

    def position_from(self, state: dict[str, Any]) -> Cursor:
        return cursor_from_state(state)


@dataclass(frozen=True)
class MixPlan:
    """The runnable form of a mixture: its components' plans and the stages after `mix`."""

    components: tuple[Plan, ...]
    mix: Mix
    workers: tuple[int, ...]  # worker processes of each component (0: in this process)
    pack: Pack | None
    batch: Batch | None
    tail: tuple[RecordStage, ...]
    hosts: int
    host: int
    fingerprint: str
    max_errors: int = 0  # the components' own ignore_errors apply to their records
    epochs: int | None = None  # a mixture ends when its components say (`on_end`)
    described: str = "{}"  # all the fingerprint covers but the weights (JSON text)

    counts_depend_on_data = True  # components end (and restart) when their own data says
    fused = False
    record_key = 3  # ints that name a record in a state: component, epoch, epoch position

    @property
    def rng_seed(self) -> int:
        return self.mix.seed

    @property
    def names(self) -> _ComponentNames:
        return _ComponentNames(self.mix.labels)

    @property
    def records_per_epoch(self) -> int:
        return sum(component.records_per_epoch for component in self.components)

    def start(self) -> MixCursor:
        return mixture_start(tuple(component.start() for component in self.components))

    @property
    def shard_stamps(self) -> tuple[ShardStamp, ...]:
        return tuple(stamp for component in self.components for stamp in component.shard_stamps)

    @functools.cached_property
    def shards(self) -> list[Any] | None:
        """What every state of this mixture says of its components' files, worked out once."""
        return shards_seen(self.shard_stamps)

    def state_of(self, position: MixCursor, stages: Stages | None) -> dict[str, Any]:
        return mix_state_to_dict(
            position,
            self.fingerprint,
            [component.fingerprint for component in self.components],
            self.mix.weights,
            stages or idle_stage_state(self.pack),
            self.shards,
        )

    def position_from(self, state: dict[str, Any]) -> MixCursor:
        return mix_cursor_from_state(
            state, [component.fingerprint for component in self.components], self.mix.labels
        )


class _ComponentNames:
    """Names a mixture's elements in errors (records are the components')."""

    def __init__(self, labels: tuple[str, ...]):
        self.labels = labels

    def describe(self, record: int) -> str:
        return f"record {record} of a component of the mixture ({', '.join(self.labels)})"

    def path_of(self, record: int) -> str | None:
        return None


def component_plan(plan: Plan, mixture_batch: Batch | None, stacked: bool, restart: bool) -> Plan:
    """A component as the mixture runs it: in chunks of a mixture batch's size, its survivors
    stacked into pieces if `stacked` (what workers do), never finished into batches."""
    batch = None
    if stacked and mixture_batch is not None:
        batch = Batch(mixture_batch.batch_size, False, mixture_batch.pad, mixture_batch.cut)
    size = mixture_batch.batch_size if mixture_batch is not None else _MIX_PIECE
    return dataclasses.replace(
        plan,
        batch=batch,
        tail=(),
        pieces_only=True,
        piece_size=size,
        epochs=None if restart else plan.epochs,
    )


def pipeline_plan(
    source: SourceView,
    seed: int | None,
    window: int | None,
    stages: tuple[Stage, ...],
    epochs: int | None,
    max_errors: int,
    host: int,
    hosts: int,
    slicing: Slicing = WHOLE,
) -> Plan:
    """The plan of one pipeline (not a mixture) for host `host` of `hosts`: what `Dataset`
    holds, in the form that runs (`seed` None: no shuffle)."""
    head, pack, batch, tail = split(stages)
    return Plan(
        source=source,
        shuffle=_shuffle(seed, window, source, slicing),
        rng_seed=seed if seed is not None else 0,
        head=head,
        batch=batch,
        tail=tail,
        epochs=epochs,
        hosts=hosts,
        host=host,
        fingerprint=pipeline_fingerprint(source, seed, window, stages, slicing),
        parts=pipeline_parts(source, seed, window, stages, slicing),
        part_names=stage_names(stages),
        max_errors=max_errors,
        pack=pack,
        shard_stamps=source.shard_stamps(),
        slicing=slicing,
    )


def pipeline_length(plan: Plan | MixPlan) -> int:
    """Items the pipeline yields on this host, every epoch of it (what `len()` of a Dataset, of
    `to_torch()` and of `to_tf()` says): 0 for `repeat(0)`; an UnknownLengthError saying why
    where the pipeline repeats forever or the data decides the count."""
    if plan.epochs == 0:
        return 0
    if plan.epochs is None and isinstance(plan, Plan):
        raise UnknownLengthError(
            "len() is unknown for a pipeline that repeats forever (repeat()): it never ends. "
            "repeat(n) runs n epochs and has a length"
        )
    deciders = _count_deciders(plan)
    if deciders:
        raise UnknownLengthError(
            f"len() of this pipeline is unknown before iterating: {deciders} make the count "
            "depend on the data"
        )
    assert isinstance(plan, Plan) and plan.epochs is not None  # a mixture has deciders
    return plan.items_per_epoch() * plan.epochs


def _count_deciders(plan: Plan | MixPlan) -> str:
    """What in the plan makes its item count depend on the data, in words ('' for nothing)."""
    if not isinstance(plan, Plan):
        return "mix (components end and restart when their own data says)"
    named = [stage.name for stage in plan.head + plan.tail if stage.changes_count]
    named += ["pack"] if plan.pack is not None else []
    named += ["ignore_errors (skipped records)"] if plan.max_errors > 0 else []
    return ", ".join(named)


def _shuffle(
    seed: int | None, window: int | None, source: SourceView, slicing: Slicing
) -> Shuffle | None:
    if seed is None:
        return None
    if window is None:
        return Shuffle(seed)
    return Shuffle(seed, window, slicing.shard_starts(source.source.shard_starts))
