"""`batch(n, drop_remainder, pad)`: stacks n consecutive elements into one item of numpy arrays.

A stream stage: the record stages hand it *pieces* (the stacked survivors of one chunk); it cuts
batches across piece boundaries, in order. A piece that is exactly one batch passes through
without a copy. Batches never span epochs; at an epoch's end the rest is one short batch, or is
dropped and counted (`drop_remainder`). With `pad`, variable-length keys are padded
(tpufeed.ops.padding) before they are stacked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from tpufeed.errors import StateError
from tpufeed.ops.base import Counters, End, Item, PieceLike, Reread
from tpufeed.ops.padding import Pad, trim
from tpufeed.ops.stacking import concat, take


@dataclass(frozen=True)
class Batch:
    batch_size: int
    drop_remainder: bool
    pad: Pad | None = None  # keys padded to a length or the smallest fitting bucket
    cut: bool = False  # cut padded keys longer than their largest bucket
    kind: ClassVar[str] = "batch"
    name: ClassVar[str] = "batch"

    def describe(self) -> Any:
        extra = [[[k, list(b)] for k, b in self.pad], self.cut] if self.pad else []
        return ["batch", self.batch_size, self.drop_remainder, *extra]


class Batcher:
    """The running batch stage: holds the elements of the batch being filled, as slices of
    pieces, between the items it hands out (never at a state: a state is taken between items)."""

    key: ClassVar[str] = "batch"

    def __init__(self, batch: Batch, counters: Counters):
        self.counters = counters
        self.pad = batch.pad  # pieces come padded to the largest buckets: batches are trimmed
        self.size = batch.batch_size
        self.drop_remainder = batch.drop_remainder
        self._pending: list[tuple[PieceLike, int, int]] = []  # (piece, start, stop) slices
        self._count = 0

    def push(self, piece: PieceLike) -> list[Item]:
        """The batches completed by `piece`."""
        if not piece.size:
            return []
        if not self._pending and piece.size == self.size:
            batch = trim(piece.payload, self.pad) if self.pad else piece.payload
            return [(batch, piece.cursor_after(piece.size - 1), piece.record_of(0), None)]
        out = []
        start = 0
        while start < piece.size:
            stop = min(piece.size, start + self.size - self._count)
            self._pending.append((piece, start, stop))
            self._count += stop - start
            start = stop
            if self._count == self.size:
                out.append(self._cut(piece.cursor_after(stop - 1)))
        return out

    def end_epoch(self, end: End) -> list[Item]:
        """The epoch's short last batch, if kept (if dropped, counted)."""
        if not self._count:
            return []
        if self.drop_remainder:
            self.counters.dropped_records += self._count
            self._pending, self._count = [], 0
            return []
        return [self._cut(end.final_cursor())]

    def get_state(self) -> None:
        """Nothing a state needs: the cursor after an item is right after its last element, so
        the elements of the next batch are read again on resume."""
        return None

    def set_state(self, saved: object, reread: Reread) -> None:
        raise StateError(f"batch holds nothing between items, but the state gives it {saved!r}")

    def _cut(self, cursor: Any) -> Item:
        parts = [
            p.payload if (lo, hi) == (0, p.size) else take(p.payload, lo, hi)
            for p, lo, hi in self._pending
        ]
        first_piece, first = self._pending[0][0], self._pending[0][1]
        self._pending, self._count = [], 0
        batch = concat(parts)
        return (
            trim(batch, self.pad) if self.pad else batch,
            cursor,
            first_piece.record_of(first),
            None,
        )
