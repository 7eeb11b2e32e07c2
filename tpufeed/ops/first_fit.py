"""First-fit packing of sequences into rows of fixed length: the pure core of `Dataset.pack`
and `transforms.PackSequences`.

A *segment* is one sequence per packed key (each at most its key's length) and is placed whole
into the first open row where every key has room. When none has and `open_rows` rows are open,
the fullest row is closed to make room; a row with no room left closes at once. Rows close in a
fixed order, so the output is a pure function of the input order.

>>> packer = RowPacker([4], open_rows=2)
>>> [len(packer.add(Segment((np.arange(n),), n))) for n in (3, 2, 1, 4)]
[0, 0, 1, 1]
>>> [[s.ref for s in row.segments] for row in packer.close_all()]
[[2]]
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from tpufeed.errors import InvalidArgumentError


class Segment(NamedTuple):
    arrays: tuple[np.ndarray, ...]  # one 1-D array per packed key
    ref: Any  # what the segment is, for whoever packs (opaque here)


class Row:
    """Segments in order, and the room each key has left (`Row([], list(lengths))` is empty;
    `Row([segment], [0])` one that a single-key segment fills)."""

    __slots__ = ("segments", "free")

    def __init__(self, segments: list[Segment], free: list[int]):
        self.segments, self.free = segments, free

    def put(self, segment: Segment, sizes: Sequence[int]) -> None:
        self.segments.append(segment)
        free = self.free
        for k, size in enumerate(sizes):
            free[k] -= size


class RowPacker:
    """Open rows and the first-fit rule; `add` returns the rows it closed, in order."""

    def __init__(self, lengths: Sequence[int], open_rows: int):
        self.lengths = list(lengths)
        self.open_rows = open_rows
        self.open: list[Row] = []
        self._room: list[int] = []  # one key: each open row's room (the hot loop reads ints)
        self._single = len(self.lengths) == 1
        self._length = self.lengths[0]

    def add(self, segment: Segment) -> Sequence[Row]:
        if self._single:  # the hot path: one key, rooms as plain ints
            size = len(segment[0][0])
            if size == self._length:  # a whole row: no open row has room, none need close
                return (Row([segment], [0]),)
            room = self._room
            for i in range(len(room)):
                if size <= room[i]:
                    return self._put_one(i, segment, size)
        else:
            sizes = [len(a) for a in segment.arrays]
            for i, row in enumerate(self.open):
                if all(size <= free for size, free in zip(sizes, row.free)):
                    return self._put(i, segment, sizes)
        return self._new_row(segment)

    def _put_one(self, i: int, segment: Segment, size: int) -> Sequence[Row]:
        """Puts `segment` (one key, `size` long) in open row `i`; the row, if that fills it."""
        room = self._room
        row = self.open[i]
        row.segments.append(segment)
        left = room[i] - size
        row.free[0] = left
        if left:
            room[i] = left
            return ()
        del room[i]
        return (self.open.pop(i),)

    def _put(self, i: int, segment: Segment, sizes: Sequence[int]) -> Sequence[Row]:
        """Puts `segment` in open row `i` (several keys); the row, if that fills it."""
        row = self.open[i]
        row.put(segment, sizes)
        self._room[i] = row.free[0]
        return () if any(row.free) else (self._take(i),)

    def _new_row(self, segment: Segment) -> Sequence[Row]:
        """Opens a row for `segment`, which no open row has room for: the fullest is closed
        first when `open_rows` are open (the rows closed, in order)."""
        closed: tuple[Row, ...] = ()
        if len(self.open) == self.open_rows:
            if self._single:
                fullest = self._room.index(min(self._room))
            else:
                fullest = min(range(len(self.open)), key=lambda i: sum(self.open[i].free))
            closed = (self._take(fullest),)
        row = Row([], list(self.lengths))
        row.put(segment, [len(a) for a in segment.arrays])
        if not any(row.free):
            return closed + (row,)
        self.open.append(row)
        self._room.append(row.free[0])
        return closed

    def _take(self, i: int) -> Row:
        del self._room[i]
        return self.open.pop(i)

    def reopen(self, row: Row) -> None:
        """Puts back a row that was open (restoring a state)."""
        self.open.append(row)
        self._room.append(row.free[0])

    def close_all(self) -> list[Row]:
        closed, self.open, self._room = self.open, [], []
        return closed


def split(
    arrays: tuple[np.ndarray, ...], lengths: Sequence[int], cut: bool
) -> list[tuple[np.ndarray, ...]]:
    """The segments of one sequence tuple: piece c holds tokens [c * L, (c + 1) * L) of each
    key (L its length); with `cut`, only the first piece."""
    if all(len(a) <= length for a, length in zip(arrays, lengths)):
        return [arrays]
    pieces = max([-(-len(a) // length) for a, length in zip(arrays, lengths)] + [1])
    if cut:
        pieces = 1
    return [
        tuple(a[c * length : (c + 1) * length] for a, length in zip(arrays, lengths))
        for c in range(pieces)
    ]


def write_rows(
    rows: Sequence[Row],
    keys: Sequence[str],
    lengths: Sequence[int],
    dtypes: Sequence[np.dtype],
    count: int,
) -> dict[str, np.ndarray]:
    """`count` rows of packed arrays (rows past `rows` are empty): for each key its tokens,
    `{key}_segment_ids` (1, 2, ... per segment, 0 on padding) and `{key}_positions` (0, 1, ...
    restarting at every segment)."""
    out: dict[str, np.ndarray] = {}
    for k, (key, length, dtype) in enumerate(zip(keys, lengths, dtypes)):
        filled = [len(row.segments) == 1 and not row.free[k] for row in rows]
        whole = [r for r, full in enumerate(filled) if full]
        if len(whole) == count:  # every row filled by one segment: nothing to zero
            tokens = np.empty((count, length), dtype)
            segment_ids = np.ones((count, length), np.int32)
            positions = np.broadcast_to(_ramp(length), (count, length)).copy()
        else:
            tokens = np.zeros((count, length), dtype)
            segment_ids = np.zeros((count, length), np.int32)
            positions = np.zeros((count, length), np.int32)
            segment_ids[whole] = 1
            positions[whole] = _ramp(length)
        for r in whole:  # rows that one segment fills: one copy each
            tokens[r] = rows[r].segments[0].arrays[k]
        ramp = _ramp(length)
        for r, row in enumerate(rows):
            if filled[r]:
                continue
            offset = 0
            for s, segment in enumerate(row.segments, 1):
                array = segment.arrays[k]
                end = offset + len(array)
                tokens[r, offset:end] = array
                segment_ids[r, offset:end] = s
                positions[r, offset:end] = ramp[: end - offset]
                offset = end
        out[key] = tokens
        out[f"{key}_segment_ids"] = segment_ids
        out[f"{key}_positions"] = positions
    return out


@functools.lru_cache(maxsize=16)
def _ramp(length: int) -> np.ndarray:
    ramp = np.arange(length, dtype=np.int32)
    ramp.flags.writeable = False
    return ramp


def check_lengths(lengths: Any, open_rows: Any) -> tuple[tuple[str, int], ...]:
    """`{key: length}` as (key, length) pairs in order; raises naming the bad value."""
    if not isinstance(lengths, dict) or not lengths:
        raise InvalidArgumentError(
            f"pack needs a dict of key -> row length, such as {{'tokens': 1024}}; got {lengths!r}"
        )
    for key, length in lengths.items():
        if not isinstance(key, str):
            raise InvalidArgumentError(f"pack keys must be str, got {key!r}")
        if not isinstance(length, int) or isinstance(length, bool) or length < 1:
            raise InvalidArgumentError(
                f"pack length of {key!r} must be a positive int, got {length!r}"
            )
    if not isinstance(open_rows, int) or isinstance(open_rows, bool) or open_rows < 1:
        raise InvalidArgumentError(f"pack open_rows must be a positive int, got {open_rows!r}")
    return tuple(lengths.items())
