"""Best-fit packing: `pack(..., method="best_fit")`, each segment into the open row it fits
most tightly.

A segment goes into the open row with the least room left among those where every key has
room (summed over the keys, as Grain's `BestFitPackIterDataset` scores its bins; a tie goes to
the row opened first). The rest is first-fit's (tpufeed.ops.first_fit): when no open row has
room and `open_rows` rows are open, the fullest is closed; a row with no room left closes at
once. Rows close in a fixed order, so the output is a pure function of the input order, and a
state that names each open row's segments in order restores the same placements.

First-fit would put the 3 beside the 5 (the first row with room); best-fit fills the 7's row,
then the 5's, and both rows close full:

>>> import numpy as np
>>> packer = BestFitPacker([10], open_rows=2)
>>> [[len(s.arrays[0]) for s in row.segments] for n in (5, 7, 3, 5)
...  for row in packer.add(Segment((np.arange(n),), n))]
[[7, 3], [5, 5]]
"""

from __future__ import annotations

from collections.abc import Sequence

from tpufeed.ops.first_fit import Row, RowPacker, Segment

__all__ = ["BestFitPacker"]


class BestFitPacker(RowPacker):
    """Open rows and the best-fit rule; `add` returns the rows it closed, in order."""

    def add(self, segment: Segment) -> Sequence[Row]:
        if not self._single:
            return self._add_keys(segment)
        size = len(segment[0][0])
        if size == self._length:  # a whole row: no open row has room, none need close
            return (Row([segment], [0]),)
        room = self._room
        fits = [left for left in room if left >= size]
        if not fits:
            return self._new_row(segment)
        return self._put_one(room.index(min(fits)), segment, size)  # the first of the tightest

    def _add_keys(self, segment: Segment) -> Sequence[Row]:
        """Several keys: the row whose rooms, summed, are least among those where each fits."""
        sizes = [len(a) for a in segment.arrays]
        best, least = -1, 0
        for i, row in enumerate(self.open):
            if all(size <= free for size, free in zip(sizes, row.free)):
                left = sum(row.free)
                if best < 0 or left < least:
                    best, least = i, left
        return self._new_row(segment) if best < 0 else self._put(best, segment, sizes)
