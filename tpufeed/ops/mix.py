"""The mix stage: the pieces of several components interleaved, in the exact proportions of
the weights, into pieces of the mixture.

`Dataset.mix([a, b], weights=[0.7, 0.3], seed=0)` makes each component a whole pipeline of its
own; `MixedPieces` takes their elements through `Feed`s, a block at a time in the order the
schedule gives (tpufeed.order.schedule), and makes `MixPiece`s, which the stream stages after
mix (`pack`, `batch`) read like any piece. A batched mixture gathers rows of the components'
stacked pieces into each batch, or stacks the elements of components run in this process
once, in order. `on_end` says what happens when a component ends: "restart" it with its next
epoch (so the mixture never ends), "stop" the mixture, or "drop" it from the mix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from tpufeed.errors import BatchError, TpufeedError
from tpufeed.observe import profiler
from tpufeed.ops.base import End, Piece
from tpufeed.ops.batch import Batch
from tpufeed.ops.padding import pad_elements
from tpufeed.ops.stacking import concat, flatten, stack, take, unflatten
from tpufeed.order.cursor import MixCursor
from tpufeed.order.schedule import next_components, phases

ON_END = ("restart", "stop", "drop")
_ELEMENT_BLOCK = 64  # outputs mixed at once when the mixture does not batch
_BLOCKS_AHEAD = 16  # blocks of the schedule computed at once (it depends on the counts only)

Slices = list[tuple[Piece, int, int]]  # (piece, start, stop) of one component, in order


@dataclass(frozen=True)
class Mix:
    """The mix stage: its components' weights (summing to 1), the schedule's seed, what a
    component's end does, and the components' names for errors and statistics."""

    weights: tuple[float, ...]
    seed: int
    on_end: str
    labels: tuple[str, ...]
    kind: ClassVar[str] = "mix"


class Feed(Protocol):
    """One component's elements, in order, a count at a time."""

    available: int  # elements waiting

    def fill(self, n: int) -> int:
        """Makes `n` elements wait, unless the component ends first; how many wait."""

    def take(self, n: int) -> Slices:
        """The next `n` waiting elements, as slices of the component's pieces."""


@dataclass(frozen=True)
class MixEnd(End):
    """The end of a mixture ("stop", or every component dropped)."""

    cursor: MixCursor

    @property
    def epoch(self) -> int:
        return 0

    @property
    def whole_epoch(self) -> bool:
        return False  # the components' epochs are theirs to check

    def final_cursor(self) -> MixCursor:
        return self.cursor


class MixPiece:
    """Outputs of the mixture, in order: `order[i]` is the component of output i, taken from
    that component's pieces (`parts`). A `PieceLike`, as the stream stages read pieces; the
    components' skipped records are charged as their pieces are taken."""

    skipped: tuple[TpufeedError, ...] = ()
    final = False
    epoch = 0

    def __init__(
        self, order: np.ndarray, parts: dict[int, Slices], before: MixCursor, payload: Any
    ):
        self.order, self.parts, self.before, self.payload = order, parts, before, payload
        self.size = len(order)
        self._last: MixCursor | None = None  # the cursor after the whole piece, once asked

    def cursor_after(self, i: int) -> MixCursor:
        if i == self.size - 1:
            if self._last is None:
                self._last = self._cursor_at_end()
            return self._last
        counts = np.bincount(self.order[: i + 1], minlength=len(self.before.taken))
        cursors = list(self.before.cursors)
        for component, count in enumerate(counts.tolist()):
            if count:
                piece, index = self._locate(component, count - 1)
                cursors[component] = piece.cursor_after(index)
        taken = tuple(t + c for t, c in zip(self.before.taken, counts.tolist()))
        return MixCursor(tuple(cursors), taken, self.before.active)

    def _cursor_at_end(self) -> MixCursor:
        """The cursor after the whole piece: each component's after its last slice."""
        cursors, taken = list(self.before.cursors), list(self.before.taken)
        for component, slices in self.parts.items():
            piece, _, hi = slices[-1]
            cursors[component] = piece.cursor_after(hi - 1)
            taken[component] += sum(hi - lo for _, lo, hi in slices)
        return MixCursor(tuple(cursors), tuple(taken), self.before.active)

    def record_of(self, i: int) -> int:
        if i == 0:  # what a batch names its first record by
            piece, lo, _ = self.parts[int(self.order[0])][0]
            return piece.record_of(lo)
        piece, index = self._element(i)
        return piece.record_of(index)

    def refs(self) -> list[tuple[int, ...]]:
        """(component, epoch, epoch position, output of its record) of each output."""
        out: list[tuple[int, ...]] = [()] * self.size
        for component, slices in self.parts.items():
            theirs = [
                (component, piece.epoch, *ref)
                for piece, lo, hi in slices
                for ref in piece.refs()[lo:hi]
            ]
            for slot, ref in zip(np.flatnonzero(self.order == component).tolist(), theirs):
                out[slot] = ref
        return out

    def _element(self, i: int) -> tuple[Piece, int]:
        component = int(self.order[i])
        return self._locate(component, int(np.count_nonzero(self.order[:i] == component)))

    def _locate(self, component: int, j: int) -> tuple[Piece, int]:
        for piece, lo, hi in self.parts[component]:
            if j < hi - lo:
                return piece, lo + j
            j -= hi - lo
        raise IndexError(j)


class MixedPieces:
    """The components' pieces, interleaved by the schedule into pieces of the mixture."""

    def __init__(self, mix: Mix, batch: Batch | None, start: MixCursor, feeds: Sequence[Feed]):
        """`batch`: the batch each mixed piece is stacked into (None: pieces of elements)."""
        self.mix, self.batch, self.start, self.feeds = mix, batch, start, feeds
        self.phase = phases(mix.seed, len(feeds))
        self.stacked = batch is not None
        self.block = batch.batch_size if batch is not None else _ELEMENT_BLOCK

    def __iter__(self) -> Iterator[MixPiece | MixEnd]:
        cursor = self.start
        ahead = np.empty(0, np.int64)  # the schedule's next outputs, computed many at once
        while any(cursor.active):
            if len(ahead) < self.block:
                ahead = next_components(
                    cursor.taken,
                    self.mix.weights,
                    self.phase,
                    cursor.active,
                    self.block * _BLOCKS_AHEAD,
                )
            order, ahead = ahead[: self.block], ahead[self.block :]
            wanted = np.bincount(order, minlength=len(self.feeds))
            short = [i for i, n in enumerate(wanted.tolist()) if n and self.feeds[i].fill(n) < n]
            if short:  # a component ended: mix up to its first missing output, then decide
                missing = {
                    i: int(np.flatnonzero(order == i)[self.feeds[i].available]) for i in short
                }
                cut = min(missing.values())
                short = [i for i in short if missing[i] == cut]
                order = order[:cut]
            parts = {
                i: self.feeds[i].take(int(n))
                for i, n in enumerate(np.bincount(order, minlength=len(self.feeds)).tolist())
                if n
            }
            if len(order):
                with profiler.span("mix"):  # the outputs in order: what mixing costs here
                    payload = self._payload(order, parts)
                piece = MixPiece(order, parts, cursor, payload)
                cursor = piece.cursor_after(len(order) - 1)
                yield piece
            if short:
                ahead = np.empty(0, np.int64)  # the schedule changes with the active set
                if self.mix.on_end == "stop":
                    cursor = cursor._replace(active=(False,) * len(cursor.active))
                else:  # "drop" ("restart" components never end: their epochs repeat)
                    cursor = cursor._replace(
                        active=tuple(a and i not in short for i, a in enumerate(cursor.active))
                    )
        yield MixEnd(cursor)

    def _payload(self, order: np.ndarray, parts: dict[int, Slices]) -> Any:
        """The outputs in order: a list, or (a batched mixture) stacked. Components run here
        hand over elements, stacked once, in order; components with workers hand over rows
        stacked in shared memory, gathered into place."""
        lists = {c: slices for c, slices in parts.items() if isinstance(slices[0][0].payload, list)}
        if not self.stacked or len(lists) == len(parts):
            if len(parts) == 1:
                values = [
                    v for piece, lo, hi in next(iter(parts.values())) for v in piece.payload[lo:hi]
                ]
            else:  # each output the next element of its component
                takes: dict[int, Callable[[], Any]] = {
                    component: iter(
                        [v for piece, lo, hi in slices for v in piece.payload[lo:hi]]
                    ).__next__
                    for component, slices in parts.items()
                }
                values = [takes[c]() for c in order.tolist()]
            if not self.stacked:
                return values
            stacked = self._stack(values, order)
            _release(parts)
            return stacked
        rows = {
            c: [take(p.payload, lo, hi) for p, lo, hi in slices]
            for c, slices in parts.items()
            if c not in lists
        }
        for c, slices in lists.items():
            values = [v for piece, lo, hi in slices for v in piece.payload[lo:hi]]
            rows[c] = [self._stack(values, np.full(len(values), c))]
        _release(lists)
        return self._scatter(order, rows)

    def _stack(self, values: list[Any], order: np.ndarray) -> Any:
        """`values` (the outputs of components `order`) stacked, padded as the batch says."""
        describe = lambda i: f"an element of mixture component {self.mix.labels[order[i]]}"  # noqa: E731
        batch = self.batch
        if batch is None:
            raise TpufeedError("a mixture stacks its elements only under batch()")
        if batch.pad:
            values = pad_elements(values, batch.pad, batch.cut, fixed=True, describe=describe)
        try:
            return stack(values, describe)
        except BatchError as error:
            components = sorted(set(order.tolist()))
            if len(components) > 1:
                names = " and ".join(self.mix.labels[c] for c in components)
                raise BatchError(
                    f"mixture components {names} make elements that do not batch "
                    f"together: {error}; make them alike in each component's map"
                ) from None
            raise

    def _scatter(self, order: np.ndarray, rows: dict[int, list[Any]]) -> Any:
        """One stacked batch whose row i is the next row of component order[i]."""
        first = min(rows)
        treedef, leaves = flatten(rows[first][0])
        outs = [
            np.empty((len(order), *np.shape(leaf)[1:]), np.asarray(leaf).dtype) for leaf in leaves
        ]
        for component, parts in rows.items():
            their_def, their = flatten(concat(parts))
            mismatch = their_def != treedef or any(
                np.shape(a)[1:] != o.shape[1:] or np.asarray(a).dtype != o.dtype
                for a, o in zip(their, outs)
            )
            if mismatch:
                raise BatchError(
                    f"mixture components {self.mix.labels[first]} and "
                    f"{self.mix.labels[component]} make elements that do not batch together: "
                    f"{_describe(leaves)} against {_describe(their)}; make them alike in each "
                    "component's map"
                )
            slots = np.flatnonzero(order == component)
            for out, leaf in zip(outs, their):
                out[slots] = leaf
        return unflatten(treedef, outs)


def _release(parts: dict[int, Slices]) -> None:
    """Lets go of elements once stacked, while they are still in the CPU's caches (freed with
    their piece, a batch or two later, they cost about twice as much)."""
    for slices in parts.values():
        for piece, lo, hi in slices:
            piece.payload[lo:hi] = [None] * (hi - lo)


def _describe(leaves: list[Any]) -> str:
    return ", ".join(f"{np.asarray(leaf).dtype}{list(np.shape(leaf)[1:])}" for leaf in leaves)
