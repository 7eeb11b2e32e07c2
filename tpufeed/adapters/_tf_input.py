"""`TfInput`: the input side of a `to_tf()` dataset, which `tf_ds.tpufeed` holds.

It runs each pass of the `tf.data.Dataset` (where each starts: `adapters/_tf_passes.py`),
keeps the exact state after each recent batch TensorFlow took, and times TensorFlow's wait for
the next batch. It imports no TensorFlow: `adapters/tf.py` makes one for `to_tf`, and
`adapters/_tf_dataset.py` hands it out as `tf_ds.tpufeed`.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Generator
from typing import Any

import numpy as np

from tpufeed.adapters._tf_passes import Passes, Start
from tpufeed.adapters._wait_clock import WaitClock
from tpufeed.errors import StateError
from tpufeed.run.state_names import TorchStateNames

__all__ = ["HISTORY", "TfInput"]

HISTORY = 1024  # states kept per pass: more than TensorFlow or Keras ever pull ahead


class TfInput(TorchStateNames):
    """The input side of a `to_tf()` dataset: where its next pass starts, the exact state after
    each recent batch of the latest pass, and that pass's wait and statistics."""

    def __init__(self, ds: Any, state: Any, history: int = HISTORY):
        self._ds = ds
        self._lock = threading.Lock()
        self._starts = Passes(ds, state)  # checks `state`
        self._passes = 0
        self._finished = False
        self._whole = False  # the latest pass is a whole one (`cardinality` batches)
        self._history = history
        self._states: deque[tuple[int, dict[str, Any]]] = deque(maxlen=history + 1)
        self.clock = WaitClock()
        self.iterator: Any = None

    @property
    def cardinality(self) -> int | None:
        """Batches in every pass, as tf.data's `cardinality()` (-1: endless), where the record
        counts alone decide them and the first pass is a whole one; else None."""
        return self._starts.cardinality

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

    def ends_after(self, batches: int) -> bool:
        """Whether the latest pass has nothing after its first `batches` batches: TensorFlow
        saw its end there, or it is a whole pass of `cardinality` batches."""
        with self._lock:
            taken = self._states[-1][0] if self._states else 0
            if self._finished and batches >= taken:
                return True
            return self._whole and self.cardinality is not None and batches == self.cardinality

    def get_state(self) -> dict[str, Any]:
        """The state after the last batch TensorFlow took from the latest pass; before the
        first pass and after `set_state`, the state the next pass starts at."""
        with self._lock:
            if self._starts.upcoming is not None or not self._states:
                return self.next_state()
            return dict(self._states[-1][1])

    def next_state(self) -> dict[str, Any]:
        """The state the next pass starts at: the one set, else the next group of epochs'."""
        starts = self._starts
        return starts.start_state(starts.upcoming or starts.fresh())

    def next_pass_whole(self) -> bool:
        """Whether the next pass will be a whole one (`cardinality` batches)."""
        upcoming = self._starts.upcoming
        return upcoming is None or upcoming.whole

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
        """The next pass starts right after `state` (one host's state, or every host's) and
        runs to the end of its group of epochs; the passes after it go on from there. A
        running pass is not changed. The state is checked here: a StateError leaves
        everything as it was."""
        start = self._starts.explicit(state)
        with self._lock:
            old, self._starts.upcoming = self._starts.upcoming, start
        if old is not None and old.iterator is not None:
            old.iterator.close()

    def start(self) -> None:
        """Begins making the next pass's first batches now (`DatasetIterator.start`), before
        TensorFlow asks for them: after `set_state(state)` (or `to_tf(state=...)`), call it,
        then restore the model, and the first batch is made meanwhile. The batches and states
        do not change. Only a pass that starts from a state has anything to begin early (a
        fresh pass starts at the first epoch, with no restore to hide behind): elsewhere it
        does nothing. Keras' `BackupAndRestore` here calls it."""
        with self._lock:
            upcoming = self._starts.upcoming
        if upcoming is not None and upcoming.iterator is not None:
            upcoming.iterator.start()

    def items(self) -> Generator[Any, None, None]:
        """A new pass: the items TensorFlow takes from it, each state after them kept."""
        number, start = self._begin()
        it, count = self._open(number, start), 0
        try:
            while True:
                try:
                    item = self.clock.call(it.__next__)
                except StopIteration:
                    following = None if count else self._starts.after(start)
                    if following is None:
                        self._ended(number)
                        return
                    it.close()  # a state taken after its group's last batch: the next group
                    start, it = following, self._open(number, following)
                    continue
                count += 1
                self._took(number, it)
                yield item
        finally:
            it.close()

    def _begin(self) -> tuple[int, Start]:
        with self._lock:
            start = self._starts.take()
            self._passes += 1
            self._finished = False
            self._states.clear()
            self.clock = WaitClock()
            return self._passes, start

    def _open(self, number: int, start: Start) -> Any:
        it = start.open(self._ds)
        state = it.get_state()
        with self._lock:
            if number == self._passes:
                self._whole = start.whole
                self._states.clear()
                self._states.append((0, state))
                self.iterator = it
        return it

    def _took(self, number: int, it: Any) -> None:
        """Pass `number` handed TensorFlow one more batch; `it` is right after it."""
        state = it.get_state()
        with self._lock:
            if number == self._passes:
                self._states.append((self._states[-1][0] + 1, state))

    def _ended(self, number: int) -> None:
        """Pass `number` handed TensorFlow its end."""
        with self._lock:
            if number == self._passes:
                self._finished = True
