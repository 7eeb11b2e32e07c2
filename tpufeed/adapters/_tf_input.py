"""`TfInput`: the input side of a `to_tf()` dataset, which `tf_ds.tpufeed` holds.

It starts each pass of the `tf.data.Dataset` (a fresh DatasetIterator, or the one made ahead
for the element_spec), keeps the exact state after each recent batch TensorFlow took, and
times TensorFlow's wait for the next batch. It imports no TensorFlow: `adapters/tf.py` makes
one for `to_tf`, and `adapters/_tf_dataset.py` hands it out as `tf_ds.tpufeed`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np

from tpufeed.adapters._wait_clock import WaitClock
from tpufeed.errors import StateError
from tpufeed.run.state_names import TorchStateNames

__all__ = ["HISTORY", "TfInput"]

HISTORY = 1024  # states kept per pass: more than TensorFlow or Keras ever pull ahead


class TfInput(TorchStateNames):
    """The input side of a `to_tf()` dataset: where its next pass starts, the exact state after
    each recent batch of the latest pass, and that pass's wait and statistics."""

    def __init__(self, ds: Any, state: Any, history: int = HISTORY):
        self._ds, self._base = ds, state
        self._lock = threading.Lock()
        self._pending: _Pending | None = None
        self._passes = 0
        self._finished = False
        self._history = history
        self._states: deque[tuple[int, dict[str, Any]]] = deque(maxlen=history + 1)
        self.clock = WaitClock()
        self.iterator: Any = None

    @property
    def wait_fraction(self) -> float:
        """Share of the pass's wall time TensorFlow spent blocked on the next batch, from the
        second batch on (start-up and the first step, where graphs are traced, left out)."""
        return self.clock.wait_fraction

    def stats(self) -> Any:
        """The pipeline statistics of the latest pass, with this wait as the consumer's."""
        stats = self.iterator.stats()
        return dataclasses.replace(
            stats,
            wait_seconds=self.clock.wait_seconds,
            wall_seconds=self.clock.wall_seconds or stats.wall_seconds,
        )

    @property
    def passes(self) -> int:
        """Passes started so far (one per TensorFlow iterator that asked for a batch)."""
        return self._passes

    @property
    def batches(self) -> int:
        """Batches TensorFlow has taken from the latest pass."""
        with self._lock:
            return self._states[-1][0] if self._states else 0

    @property
    def finished(self) -> bool:
        """Whether TensorFlow has taken the latest pass's last batch and seen its end."""
        return self._finished

    def get_state(self) -> dict[str, Any]:
        """The state after the last batch TensorFlow took from the latest pass; before the
        first pass and after `set_state`, the state the next pass starts at."""
        with self._lock:
            if self._pending is not None:
                return dict(self._pending.start)
            return dict(self._states[-1][1])

    def state_after(self, batches: int) -> dict[str, Any]:
        """The state right after the first `batches` batches of the latest pass: exact for a
        loop that counts the batches it consumed while TensorFlow pulled some ahead.

        >>> tf_ds.tpufeed.state_after(steps_done)   # doctest: +SKIP
        """
        with self._lock:
            if isinstance(batches, (int, np.integer)) and not isinstance(batches, bool):
                for count, state in self._states:
                    if count == batches:
                        return dict(state)
            kept = f"{self._states[0][0]}..{self._states[-1][0]}" if self._states else "none"
            raise StateError(
                f"to_tf: no state after batch {batches!r} of pass {self._passes}; "
                f"the states kept are those after batches {kept} (up to the last "
                f"{self._history} TensorFlow took)"
            )

    def set_state(self, state: Any) -> None:
        """The next pass starts right after `state` (one host's state, or every host's); the
        passes after it start where `to_tf(state=...)` says again. A running pass is not
        changed. The state is checked here: a StateError leaves everything as it was."""
        fresh = self._ds.iterator(state)
        with self._lock:
            old, self._pending = self._pending, _Pending(fresh, fresh.get_state())
        if old is not None:
            old.iterator.close()

    def hold(self, first: Any, start: dict[str, Any], head: Any) -> None:
        """Keeps the iterator that made the element_spec's batch `head` for the first pass."""
        self._pending = _Pending(first, start, head)

    def start_pass(self) -> tuple[int, Any, Iterator[Any]]:
        """A new pass: its number, its DatasetIterator and the batches to hand over."""
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is None:
            it = self._ds.iterator(self._base)
            pending = _Pending(it, it.get_state())
        items = (
            pending.iterator if pending.head is _NOTHING else _chain(pending.head, pending.iterator)
        )
        with self._lock:
            self._passes += 1
            self._finished = False
            self._states.clear()
            self._states.append((0, pending.start))
            self.clock, self.iterator = WaitClock(), pending.iterator
            return self._passes, pending.iterator, items

    def took(self, number: int, it: Any) -> None:
        """Pass `number` handed TensorFlow one more batch; `it` is right after it."""
        state = it.get_state()
        with self._lock:
            if number == self._passes:
                self._states.append((self._states[-1][0] + 1, state))

    def ended(self, number: int) -> None:
        """Pass `number` handed TensorFlow its end."""
        with self._lock:
            if number == self._passes:
                self._finished = True


_NOTHING = object()


@dataclasses.dataclass
class _Pending:
    """An iterator made ahead of the pass it starts: its start state and a batch it peeked."""

    iterator: Any
    start: dict[str, Any]
    head: Any = _NOTHING


def _chain(head: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield head
    yield from rest
