"""Which records and positions each epoch reads: `slice`, `take` and `skip` as pure arithmetic.

A slice placed before `shuffle` restricts the *records*: the epoch is those records, shuffled
among themselves. One placed after `shuffle` restricts the *positions* of the shuffled order:
the epoch is those places of a permutation of every record, a fresh set each epoch. Either way
an epoch is positions 0..count-1, shared out between hosts like any other epoch, so exactly
once and exact resume hold as they do without a slice. Each is a `range`, and a slice of a
slice is one range again.

>>> cut = Slicing(records=range(10)[2:8])
>>> cut.count(10), cut.records_at(10, None, 0, np.arange(3)).tolist()
(6, [2, 3, 4])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpufeed.errors import InvalidArgumentError
from tpufeed.order.permutation import Shuffle
from tpufeed.order.permutation import records_at as shuffled_records


@dataclass(frozen=True)
class Slicing:
    """`records`: the source's records an epoch reads (None: all of them); `positions`: the
    places of the shuffled order it reads (None: all). Only a shuffled pipeline has
    `positions`: without a shuffle a slice is one of records."""

    records: range | None = None
    positions: range | None = None

    def kept(self, n: int) -> range:
        """The records an epoch reads from, of a source of `n`."""
        return self.records if self.records is not None else range(n)

    def count(self, n: int) -> int:
        """Positions in each epoch, of a source of `n` records."""
        if self.positions is not None:
            return len(self.positions)
        return len(self.kept(n))

    def records_at(
        self, n: int, shuffle: Shuffle | None, epoch: int, positions: np.ndarray
    ) -> np.ndarray:
        """Record indices (of the whole source of `n`) at epoch `positions`."""
        positions = np.asarray(positions, dtype=np.int64)
        if self.positions is not None:
            positions = self.positions.start + positions * self.positions.step
        kept = self.kept(n)
        records = shuffled_records(len(kept), shuffle, epoch, positions)
        if self.records is None:
            return records
        return kept.start + records * kept.step

    def index_of(self, record: int) -> int:
        """Where `record` stands among the records an epoch reads from (`map_with_index`)."""
        if self.records is None:
            return record
        return (record - self.records.start) // self.records.step

    def sliced(self, cut: slice, n: int, shuffled: bool) -> Slicing:
        """This slicing followed by `cut`: of the positions where the pipeline is shuffled
        already, else of the records."""
        if shuffled:
            every = range(len(self.kept(n)))
            places = (self.positions if self.positions is not None else every)[cut]
            return Slicing(self.records, None if places == every else places)
        if self.positions is not None:
            raise InvalidArgumentError("a slice of records cannot follow a slice of positions")
        records = self.kept(n)[cut]
        return Slicing(None if records == range(n) else records, None)

    def shard_starts(self, starts: tuple[int, ...]) -> tuple[int, ...]:
        """The first record of each shard, among the records kept (a windowed shuffle's
        shards): a slice of whole steps of 1 keeps the shards it cuts through."""
        if self.records is None:
            return starts
        kept = self.records
        if kept.step != 1:
            raise InvalidArgumentError(
                f"shuffle(window=...) reads shards a window at a time, and a slice with step "
                f"{kept.step} keeps no shard whole: shuffle without a window, or slice with "
                "step 1"
            )
        inside = sorted({min(max(s - kept.start, 0), len(kept)) for s in starts})
        return tuple(inside) if len(inside) > 1 else (0, len(kept))

    def describe(self) -> list[list[int | None]] | None:
        """What a fingerprint knows of the slicing (None: nothing is sliced)."""
        if self.records is None and self.positions is None:
            return None
        return [_triple(self.records), _triple(self.positions)]


def _triple(cut: range | None) -> list[int | None]:
    return [None, None, None] if cut is None else [cut.start, cut.stop, cut.step]


def check_cut(cut: object, what: str) -> slice:
    """`cut` as a slice of whole numbers; raises naming `what` (the method) otherwise."""
    if not isinstance(cut, slice):
        raise InvalidArgumentError(f"{what} takes a slice, such as slice(10, 20), got {cut!r}")
    for name in ("start", "stop", "step"):
        value = getattr(cut, name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise InvalidArgumentError(f"{what}: the slice's {name} must be an int, got {value!r}")
    if cut.step is not None and cut.step < 1:
        raise InvalidArgumentError(
            f"{what}: the slice's step must be a positive int, got {cut.step} (a reversed "
            "order is a different permutation: use shuffle)"
        )
    return cut


WHOLE = Slicing()  # every record, every position: a pipeline without a slice
