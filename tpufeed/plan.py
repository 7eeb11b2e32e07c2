"""Plan: the runnable, picklable form of a Dataset, as workers receive it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tpufeed.order.cursor import Cursor
from tpufeed.order.permutation import Shuffle
from tpufeed.sources.view import SourceView
from tpufeed.ops.base import RecordStage
from tpufeed.ops.batch import Batch
from tpufeed.ops.pack import Pack
from tpufeed.order.state import state_to_dict

_UNBATCHED_CHUNK = 64  # units per chunk when nothing batches
_PACKED_CHUNK = 256  # units per chunk feeding pack: fewer, larger hand-offs to the parent


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

    record_key = 1  # ints that name a record in a state: its epoch position

    @property
    def counts_depend_on_data(self) -> bool:
        """Whether the items a host makes from its share can depend on the records' contents
        (a filter, flat_map, pack or skipped bad records). If not, hosts with equal shares stay in
        lockstep, and one host's state tells where every host stands. The one answer that the
        workers, elastic resume and the device adapters all use."""
        return (self.max_errors > 0 or self.pack is not None
                or any(stage.changes_count for stage in self.head + self.tail))

    @property
    def fused(self) -> bool:
        """Whether each chunk is exactly one batch (so workers finish whole batches)."""
        return self.batch is not None and not self.counts_depend_on_data and not self.pieces_only

    def state_of(self, cursor: Cursor, stages: dict[str, Any] | None) -> dict[str, Any]:
        """The iterator state at `cursor` (with the stream stages' `stages`)."""
        return state_to_dict(cursor, self.fingerprint, stages)

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
