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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpufeed.errors import InvalidArgumentError


@dataclass(frozen=True)
class Segment:
    arrays: tuple[np.ndarray, ...]  # one 1-D array per packed key
    ref: Any  # what the segment is, for whoever packs (opaque here)


class Row:
    __slots__ = ("segments", "free")

    def __init__(self, lengths: Sequence[int]):
        self.segments: list[Segment] = []
        self.free = list(lengths)

    def fits(self, sizes: Sequence[int]) -> bool:
        return all(size <= free for size, free in zip(sizes, self.free))

    def put(self, segment: Segment, sizes: Sequence[int]) -> None:
        self.segments.append(segment)
        self.free = [free - size for free, size in zip(self.free, sizes)]


class RowPacker:
    """Open rows and the first-fit rule; `add` returns the rows it closed, in order."""

    def __init__(self, lengths: Sequence[int], open_rows: int):
        self.lengths = list(lengths)
        self.open_rows = open_rows
        self.open: list[Row] = []

    def add(self, segment: Segment) -> list[Row]:
        sizes = [len(a) for a in segment.arrays]
        for row in self.open:
            if row.fits(sizes):
                return self._put(row, segment, sizes)
        closed = []
        if len(self.open) == self.open_rows:
            fullest = min(range(len(self.open)), key=lambda i: sum(self.open[i].free))
            closed.append(self.open.pop(fullest))
        row = Row(self.lengths)
        self.open.append(row)
        return closed + self._put(row, segment, sizes)

    def _put(self, row: Row, segment: Segment, sizes: list[int]) -> list[Row]:
        row.put(segment, sizes)
        if not any(row.free):
            self.open.remove(row)
            return [row]
        return []

    def close_all(self) -> list[Row]:
        closed, self.open = self.open, []
        return closed


def split(arrays: Sequence[np.ndarray], lengths: Sequence[int], cut: bool) -> list[tuple[np.ndarray, ...]]:
    """The segments of one sequence tuple: piece c holds tokens [c * L, (c + 1) * L) of each
    key (L its length); with `cut`, only the first piece."""
    pieces = max([-(-len(a) // length) for a, length in zip(arrays, lengths)] + [1])
    if cut:
        pieces = 1
    return [tuple(a[c * length:(c + 1) * length] for a, length in zip(arrays, lengths))
            for c in range(pieces)]


def write_rows(rows: Sequence[Row], keys: Sequence[str], lengths: Sequence[int],
               dtypes: Sequence[np.dtype], count: int) -> dict[str, np.ndarray]:
    """`count` rows of packed arrays (rows past `rows` are empty): for each key its tokens,
    `{key}_segment_ids` (1, 2, ... per segment, 0 on padding) and `{key}_positions` (0, 1, ...
    restarting at every segment)."""
    out: dict[str, np.ndarray] = {}
    for k, (key, length, dtype) in enumerate(zip(keys, lengths, dtypes)):
        tokens = np.zeros((count, length), dtype)
        segment_ids = np.zeros((count, length), np.int32)
        positions = np.zeros((count, length), np.int32)
        ramp = np.arange(length, dtype=np.int32)
        for r, row in enumerate(rows):
            offset = 0
            for s, segment in enumerate(row.segments, 1):
                array = segment.arrays[k]
                end = offset + len(array)
                tokens[r, offset:end] = array
                segment_ids[r, offset:end] = s
                positions[r, offset:end] = ramp[:len(array)]
                offset = end
        out[key] = tokens
        out[f"{key}_segment_ids"] = segment_ids
        out[f"{key}_positions"] = positions
    return out


def check_lengths(lengths: Any, open_rows: Any) -> tuple[tuple[str, int], ...]:
    """`{key: length}` as (key, length) pairs in order; raises naming the bad value."""
    if not isinstance(lengths, dict) or not lengths:
        raise InvalidArgumentError(f"pack needs a dict of key -> row length, such as "
                                   f"{{'tokens': 1024}}; got {lengths!r}")
    for key, length in lengths.items():
        if not isinstance(key, str):
            raise InvalidArgumentError(f"pack keys must be str, got {key!r}")
        if not isinstance(length, int) or isinstance(length, bool) or length < 1:
            raise InvalidArgumentError(f"pack length of {key!r} must be a positive int, got {length!r}")
    if not isinstance(open_rows, int) or isinstance(open_rows, bool) or open_rows < 1:
        raise InvalidArgumentError(f"pack open_rows must be a positive int, got {open_rows!r}")
    return tuple(lengths.items())
