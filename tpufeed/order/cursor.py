"""Where a host stands in an epoch: its cursor, and the index spaces earlier stops left.

Pure arithmetic on integers: no I/O, no records (order/permutation.py turns positions into
records).

Terms:
- An epoch is *positions* 0..N-1. A host walks a *stream* of *units*, each one position: first
  its *carries*, (position, skip) pairs another host left half delivered, then its *stride*, the
  indices `base + host + k * hosts` (k = 0, 1, ...) of the segment's *index space*.
- The index space is the epoch's positions, or what earlier stops left of them: a stop where
  the hosts were not in lockstep (their counts depend on the data) adds a `Layer` that lists how
  many stride indices each old host had consumed; the indices nobody consumed, in order, are the
  next index space. A stop in lockstep only moves `base`.
- A host's cursor counts the units it `consumed` whole and the outputs of the next unit already
  `emitted` (a unit may make several outputs, through `flat_map`).

Exactness on any host count follows: the positions consumed by all hosts of a stop are known
from their cursors, and the new hosts split exactly the rest between them (order/elastic.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from tpufeed.errors import StateError


def share_size(n: int, base: int, host: int, hosts: int) -> int:
    """Number of indices in [base, n) that host `host` of `hosts` takes."""
    return max(0, -(-(n - base - host) // hosts))


def host_positions(base: int, host: int, hosts: int, start: int, count: int) -> np.ndarray:
    """Indices of the host's start-th .. (start+count-1)-th stride units."""
    return base + host + (start + np.arange(count, dtype=np.int64)) * hosts


@dataclass(frozen=True)
class Layer:
    """What a stop out of lockstep left of an index space: below `base` every index was
    consumed; from `base` on, host h of `hosts` had consumed its first `consumed[h]` strides."""

    base: int
    hosts: int
    consumed: tuple[int, ...]

    def size(self, parent: int) -> int:
        """Indices of the parent space of size `parent` that nobody consumed."""
        return sum(
            max(0, share_size(parent, self.base, h, self.hosts) - c)
            for h, c in enumerate(self.consumed)
        )

    def parent_indices(self, indices: np.ndarray, parent: int) -> np.ndarray:
        """The parent-space index of each of this layer's `indices` (its i-th unconsumed index)."""
        starts, first_rows, widths, columns = _bands(self, parent)
        band = np.searchsorted(starts, indices, side="right") - 1
        offset = indices - starts[band]
        width = np.maximum(widths[band], 1)
        rows = first_rows[band] + offset // width
        return self.base + columns[band, offset % width] + rows * self.hosts


@functools.lru_cache(maxsize=64)
def _bands(layer: Layer, parent: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows k (stride counts) split into bands in which the same hosts still have index k.

    Host h has rows [consumed[h], share[h]); between two consecutive bounds the set of hosts
    with a row is fixed. Per band: its first unconsumed index (cumulative), first row, host
    count, and the hosts (padded to a rectangle).
    """
    hosts = layer.hosts
    shares = [share_size(parent, layer.base, h, hosts) for h in range(hosts)]
    bounds = sorted(set(layer.consumed) | set(shares))
    starts, rows, widths, columns = [], [], [], []
    total = 0
    for low, high in zip(bounds, bounds[1:]):
        live = [h for h in range(hosts) if layer.consumed[h] <= low < shares[h]]
        starts.append(total)
        rows.append(low)
        widths.append(len(live))
        columns.append(live + [0] * (hosts - len(live)))
        total += (high - low) * len(live)
    if not starts:
        return (np.zeros(1, np.int64),) * 3 + (np.zeros((1, 1), np.int64),)
    return (
        np.array(starts, np.int64),
        np.array(rows, np.int64),
        np.array(widths, np.int64),
        np.array(columns, np.int64).reshape(len(starts), hosts),
    )


class Cursor(NamedTuple):
    """Where a host stands: epoch, segment (layers, base, hosts), host, carries, progress.

    A named tuple rather than a dataclass: one is made for every item handed out."""

    epoch: int
    base: int
    hosts: int
    host: int
    consumed: int  # units of the stream delivered whole
    emitted: int = 0  # outputs of unit `consumed` already delivered
    layers: tuple[Layer, ...] = ()
    carries: tuple[tuple[int, int], ...] = ()  # (epoch position, outputs already delivered)

    def space_sizes(self, n: int) -> list[int]:
        """Sizes of the index spaces, from the epoch's (n) to the stride's."""
        sizes = [n]
        for layer in self.layers:
            sizes.append(layer.size(sizes[-1]))
        return sizes

    def stream_size(self, n: int) -> int:
        """Units in this host's stream for the epoch: its carries, then its stride."""
        top = self.space_sizes(n)[-1]
        return len(self.carries) + share_size(top, self.base, self.host, self.hosts)

    def positions(self, n: int, start: int, count: int) -> tuple[np.ndarray, np.ndarray | None]:
        """Epoch positions of units [start, start + count) of the stream, and the outputs to
        skip in each (None: none), which is how a stop in the middle of a unit resumes."""
        carried = self.carries[start : start + count]
        stride_start = max(0, start - len(self.carries))
        stride = host_positions(
            self.base, self.host, self.hosts, stride_start, count - len(carried)
        )
        if self.layers and len(stride):
            sizes = self.space_sizes(n)
            for layer, parent in zip(reversed(self.layers), reversed(sizes[:-1])):
                stride = layer.parent_indices(stride, parent)
        skips = None
        if carried or start <= self.consumed < start + count and self.emitted:
            skips = np.zeros(count, np.int64)
            skips[: len(carried)] = [skip for _, skip in carried]
            if start <= self.consumed < start + count:
                skips[self.consumed - start] = max(skips[self.consumed - start], self.emitted)
        if carried:
            stride = np.concatenate([np.array([p for p, _ in carried], np.int64), stride])
        return stride, skips

    def after(self, consumed: int, emitted: int = 0) -> Cursor:
        """This cursor moved on to `consumed` whole units and `emitted` outputs of the next."""
        return Cursor(
            self.epoch,
            self.base,
            self.hosts,
            self.host,
            consumed,
            emitted,
            self.layers,
            self.carries,
        )


def check_in_range(cursor: Cursor, n: int) -> Cursor:
    """Raises StateError unless every number of `cursor` fits an epoch of `n` positions (a
    hand-edited or damaged state would otherwise resume to silently nothing)."""
    size = n
    for depth, layer in enumerate(cursor.layers):
        for h, done in enumerate(layer.consumed):
            if layer.base > size or done > share_size(size, layer.base, h, layer.hosts):
                raise StateError(
                    f"iterator state layer {depth} says host {h} consumed {done} of "
                    f"an index space of {size} from {layer.base}: it does not fit "
                    f"this dataset ({n} records per epoch)"
                )
        size = layer.size(size)
    if cursor.base > size:
        raise StateError(
            f"iterator state starts its segment at {cursor.base}, past the "
            f"{size} positions it has ({n} records per epoch)"
        )
    for position, _ in cursor.carries:
        if position >= n:
            raise StateError(
                f"iterator state carries position {position}, past the {n} records of an epoch"
            )
    units = cursor.stream_size(n)
    if cursor.consumed > units or (cursor.emitted and cursor.consumed >= units):
        raise StateError(
            f"iterator state says {cursor.consumed} units consumed"
            + (f" and {cursor.emitted} outputs of the next" if cursor.emitted else "")
            + f", but host {cursor.host} of {cursor.hosts} has {units} in an epoch "
            f"of this dataset ({n} records)"
        )
    return cursor


def epoch_start(epoch: int, hosts: int, host: int) -> Cursor:
    return Cursor(epoch, 0, hosts, host, 0)


def at_segment_start(cursor: Cursor) -> bool:
    """Nothing of a plain segment consumed yet: every host of a lockstep run is there too."""
    return cursor.consumed == 0 and cursor.emitted == 0 and not cursor.carries and not cursor.layers


class MixCursor(NamedTuple):
    """Where a mixture stands: each component's cursor, the elements taken from each (the
    schedule's state, tpufeed.order.schedule), and which components are still mixed."""

    cursors: tuple[Cursor, ...]
    taken: tuple[int, ...]
    active: tuple[bool, ...]


def mixture_start(cursors: tuple[Cursor, ...]) -> MixCursor:
    """A mixture before its first element: every component at `cursors`, all mixed."""
    return MixCursor(cursors, (0,) * len(cursors), (True,) * len(cursors))
