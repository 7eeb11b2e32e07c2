"""`pack({"tokens": 1024}, open_rows=16)`: sequences of any length into rows of one length.

A stream stage: it sees the elements in order and fills rows over `open_rows` open rows,
first-fit (tpufeed.ops.first_fit) or, with `method="best_fit"`, best-fit
(tpufeed.ops.best_fit). Each packed key k gives `k`, `k_segment_ids` (0 on padding) and
`k_positions`, as Grain names them. A sequence longer than its row is split over several rows
(each piece its own segment), never cut, unless `cut=True`. With `batch(B)` after it, every
step is `[B, length]`; an epoch's last batch is filled with empty rows (counted in
`stats().padded_rows`) unless `drop_remainder`.

The state holds no tokens: each segment waiting in a row is named by its record (epoch
position; in a mixture, component, epoch and position), the output of that record and the
piece, and is read again on restore. Rows do not span epochs.
"""

from __future__ import annotations

import difflib
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from tpufeed.errors import InvalidArgumentError, StateError, TransformError
from tpufeed.ops.base import Counters, End, Item, PieceLike, Reread
from tpufeed.ops.batch import Batch
from tpufeed.ops.best_fit import BestFitPacker
from tpufeed.ops.first_fit import Row, RowPacker, Segment, split, write_rows
from tpufeed.ops.pack_state import PackState, Ref, SavedPack, run_of
from tpufeed.order.cursor import Cursor

_SEGMENTS = operator.attrgetter("segments")

new_segment = tuple.__new__  # new_segment(Segment, (arrays, ref)): Segment(...) minus a Python call

# pack(method=...): the rule that places each segment among the open rows.
PACKERS: dict[str, type[RowPacker]] = {"best_fit": BestFitPacker, "first_fit": RowPacker}


def packer_for(method: Any, caller: str) -> type[RowPacker]:
    """The packer of `method`; an unknown one raises naming `caller`, it and a near one."""
    if not isinstance(method, str) or method not in PACKERS:
        near = difflib.get_close_matches(str(method), PACKERS, n=1)
        raise InvalidArgumentError(
            f"{caller} method must be one of {sorted(PACKERS)}, got {method!r}"
            + (f" (did you mean {near[0]!r}?)" if near else "")
        )
    return PACKERS[method]


@dataclass(frozen=True)
class Pack:
    lengths: tuple[tuple[str, int], ...]
    open_rows: int = 16
    cut: bool = False
    method: str = "first_fit"
    kind: ClassVar[str] = "pack"
    name: ClassVar[str] = "pack"

    def __post_init__(self) -> None:
        packer_for(self.method, "pack")

    def describe(self) -> Any:
        described = ["pack", [list(kv) for kv in self.lengths], self.open_rows, self.cut]
        # first_fit's pipelines keep the fingerprints (and so the states) they had.
        return described if self.method == "first_fit" else [*described, self.method]


class Packer:
    """The running pack stage (and the batch after it, if any): rows closed but not yet handed
    out wait in `closed`; `get_state()` names every segment of those and of the open rows."""

    key: ClassVar[str] = "pack"

    def __init__(self, pack: Pack, batch: Batch | None, counters: Counters):
        self.keys = [key for key, _ in pack.lengths]
        self.keyset = set(self.keys)
        self.lengths = [length for _, length in pack.lengths]
        self.cut, self.batch = pack.cut, batch
        self.rows_per_item = batch.batch_size if batch is not None else 1
        self.packer = packer_for(pack.method, "pack")(self.lengths, pack.open_rows)
        self.closed: list[Row] = []  # closed rows waiting to be handed out, in order
        self.dtypes: list[np.dtype] | None = None
        self.counters = counters

    def push(self, piece: PieceLike) -> list[Item]:
        out: list[Item] = []
        closed, add, per_item = self.closed, self.packer.add, self.rows_per_item
        key, limit = self.keys[0], self.lengths[0]
        fast = len(self.keys) == 1
        for i, (element, ref) in enumerate(zip(piece.payload, piece.refs())):
            # The common case inline (one key, a 1-D array that fits a row): this loop runs on
            # the parent's CPU, the scarcest on a many-core host.
            array = element.get(key) if fast and type(element) is dict else None
            if type(array) is np.ndarray and array.ndim == 1 and len(element) == 1:
                if self.dtypes is None:
                    self.dtypes = [array.dtype]
                size = len(array)
                if size <= limit:
                    if size:
                        closed.extend(add(new_segment(Segment, ((array,), (*ref, 0)))))
                else:  # whole rows first, then the rest first-fit
                    wholes = 1 if self.cut else size // limit
                    views = array[: wholes * limit].reshape(wholes, limit)
                    closed.extend(
                        [
                            Row([new_segment(Segment, ((view,), (*ref, p)))], [0])
                            for p, view in enumerate(views)
                        ]
                    )
                    if wholes * limit < size and not self.cut:
                        closed.extend(
                            add(new_segment(Segment, ((array[wholes * limit :],), (*ref, wholes))))
                        )
            else:
                self._add(element, ref, piece, i)
            if len(closed) >= per_item:
                out += self._items(piece.cursor_after(i))
        return out

    def end_epoch(self, end: End) -> list[Item]:
        """Closes every row; the last item is filled with empty rows (or dropped)."""
        self.closed.extend(self.packer.close_all())
        cursor = end.final_cursor()
        out = self._items(cursor)
        if self.closed:
            if self.batch is not None and self.batch.drop_remainder:
                self.counters.dropped_records += sum(len(row.segments) for row in self.closed)
                self.closed.clear()
            else:
                self.counters.padded_rows += self.rows_per_item - len(self.closed)
                out.append(self._item(len(self.closed), cursor))
        return out

    def get_state(self) -> PackState:
        """What the stage holds now: a snapshot, written out only when a state is asked for."""
        rows = (*self.closed, *self.packer.open)
        return PackState(rows, tuple(map(len, map(_SEGMENTS, rows))), len(self.closed))

    def set_state(self, saved: SavedPack, reread: Reread) -> None:
        """Rebuilds the rows of `saved` (or, after a change of host count, places its `loose`
        segments afresh), reading their records again."""
        wanted = saved.records()
        found = reread(wanted) if wanted else {}
        for r, (count, refs) in enumerate(saved.rows):
            if count > 1:  # whole rows, one piece each
                self.closed.extend(
                    Row([self._segment(piece, found)], [0]) for piece in run_of(refs[0], count)
                )
                continue
            row = Row([], list(self.lengths))
            for ref in refs:
                segment = self._segment(ref, found)
                sizes = [len(a) for a in segment.arrays]
                if any(size > free for size, free in zip(sizes, row.free)):
                    raise StateError(
                        f"iterator state field pack puts {list(ref)} in a row "
                        "without room for it: the state was edited, or the data "
                        "or the stages changed"
                    )
                row.put(segment, sizes)
            (self.closed.append if r < saved.closed else self.packer.reopen)(row)
        for count, refs in saved.loose:
            for ref in refs if count == 1 else run_of(refs[0], count):
                self.closed.extend(self.packer.add(self._segment(ref, found)))

    def _segment(self, ref: Ref, found: dict[tuple[int, ...], list[Any]]) -> Segment:
        record, out, part = ref[:-2], ref[-2], ref[-1]
        outputs = found.get(record, [])
        if out >= len(outputs):
            raise StateError(
                f"the state names output {out} of record {list(record)}, which now "
                f"makes {len(outputs)}: the data or the stages changed"
            )
        pieces = split(self._arrays(outputs[out], lambda: record[-1]), self.lengths, self.cut)
        if part >= len(pieces):
            raise StateError(
                f"the state names piece {part} of record {list(record)}, which now "
                f"has {len(pieces)}: the data or the stages changed"
            )
        return Segment(pieces[part], ref)

    def _add(self, element: Any, ref: tuple[int, ...], piece: PieceLike, i: int) -> None:
        arrays = self._arrays(element, lambda: piece.record_of(i))
        if len(arrays) == 1 and 0 < len(arrays[0]) <= self.lengths[0]:  # the common case
            self.closed.extend(self.packer.add(Segment(arrays, (*ref, 0))))
            return
        add, closed = self.packer.add, self.closed
        for part, arrays_of_part in enumerate(split(arrays, self.lengths, self.cut)):
            if any(len(a) for a in arrays_of_part):
                closed.extend(add(Segment(arrays_of_part, (*ref, part))))

    def _arrays(self, element: Any, record: Callable[[], int]) -> tuple[np.ndarray, ...]:
        if not isinstance(element, dict) or element.keys() != self.keyset:
            got = sorted(element) if isinstance(element, dict) else type(element).__name__
            raise TransformError(
                f"pack({dict(zip(self.keys, self.lengths))}) packs elements that are dicts of "
                f"exactly those keys; record {record()} gave {got} (select the keys in a map "
                "before pack)",
                record=record(),
            )
        arrays = tuple(np.asarray(element[key]) for key in self.keys)
        for key, array in zip(self.keys, arrays):
            if array.ndim != 1:
                raise TransformError(
                    f"pack: {key!r} of record {record()} has shape "
                    f"{array.shape}; packing needs 1-D sequences",
                    record=record(),
                )
        if self.dtypes is None:
            self.dtypes = [a.dtype for a in arrays]
        return arrays

    def _items(self, cursor: Cursor) -> list[Item]:
        out = []
        while len(self.closed) >= self.rows_per_item:
            out.append(self._item(self.rows_per_item, cursor))
        return out

    def _item(self, rows: int, cursor: Cursor) -> Item:
        taken = self.closed[:rows]
        del self.closed[:rows]
        dtypes = self.dtypes or [np.dtype(np.int32)] * len(self.keys)
        item = write_rows(taken, self.keys, self.lengths, dtypes, self.rows_per_item)
        self.counters.pack_capacity += self.rows_per_item * self.lengths[0]
        self.counters.pack_tokens += self.lengths[0] * len(taken) - sum([r.free[0] for r in taken])
        if self.batch is None:
            item = {key: value[0] for key, value in item.items()}
        # The stages after batch draw their rng from the first segment's epoch position.
        first = taken[0].segments[0].ref[0] if taken and taken[0].segments else 0
        return item, cursor, first, self.get_state()
