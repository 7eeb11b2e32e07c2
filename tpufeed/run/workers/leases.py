"""Batches lent to the consumer straight out of a worker's shared-memory slot, never copied.

A batch a worker wrote into a slot reaches the consumer as numpy views of that slot. The slot
is lent, not freed: it goes back to its worker only once the consumer has dropped every array
of the batch (a weak reference to the views' common base says when), in whatever thread that
happens. The parent never copies a batch unless the consumer holds so many that the workers
would run out of slots: past `cap` lent slots per worker, a batch is copied out and its slot
freed at once, so a consumer that keeps every batch (`list(ds)`) never stalls the workers.
Under a shared-memory budget, a worker's lent batches also stay within half its share (past
that, copied too), so the other half is always there for a batch of up to half a share. A
larger batch that does not fit beside the lent ones, while the consumer waits for it, comes
through the pipe instead (`Dealer.spill_if_stuck`).
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np


class Leases:
    """Slots lent to the consumer, per worker, and those it has given back."""

    def __init__(self, workers: int, cap: int, share: int | None = None):
        self.cap, self.share = cap, share
        self.lent = [0] * workers
        self.lent_bytes = [0] * workers
        self._refs: dict[tuple[int, int], weakref.ref] = {}
        self._sizes: dict[tuple[int, int], int] = {}
        self._returned: deque[tuple[int, int]] = deque()  # appended from any thread

    def _giver(self, key: tuple[int, int]) -> Callable[[Any], None]:
        """The weakref callback that gives `key` back (appending is thread-safe)."""
        return lambda _: self._returned.append(key)

    def can_lend(self, worker: int, nbytes: int = 0) -> bool:
        """Whether a batch of `nbytes` (its segment's size) of `worker` may be lent."""
        return self.lent[worker] < self.cap and (
            self.share is None or self.lent_bytes[worker] + nbytes <= self.share // 2
        )

    def lend(self, worker: int, slot: int, segment: Any, nbytes: int) -> np.ndarray:
        """The base array every leaf of the lent batch is a view of: the slot goes back when it
        and all of them are gone."""
        base = np.frombuffer(segment, np.uint8, count=nbytes)
        key = (worker, slot)
        self._refs[key] = weakref.ref(base, self._giver(key))
        self._sizes[key] = nbytes
        self.lent[worker] += 1
        self.lent_bytes[worker] += nbytes
        return base

    def returned(self) -> list[tuple[int, int]]:
        """(worker, slot) of every slot given back since the last call."""
        out = []
        while self._returned:
            worker, slot = key = self._returned.popleft()
            del self._refs[key]
            self.lent[worker] -= 1
            self.lent_bytes[worker] -= self._sizes.pop(key)
            out.append(key)
        return out
