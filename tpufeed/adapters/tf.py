"""`Dataset.to_tf`: the pipeline as a real `tf.data.Dataset`, usable with `model.fit`.

The element_spec comes from the first batch: dtypes and shapes of every leaf, with the batch
dimension fixed when the pipeline batches with `drop_remainder=True` (as `tf.data` does) and
`None` otherwise. Bytes and str leaves become `tf.string`.

Each iteration of the returned dataset (each Keras epoch) is a fresh pass from the start of
the pipeline, so give the pipeline its epochs with `.repeat(n)` (a new shuffle each) and pass
`steps_per_epoch` to `fit`.

`tf_ds.tpufeed` (a `TfInput`) tells how long the latest pass kept TensorFlow waiting for the
next batch (`wait_fraction`, the pipeline's `stats()`): with no `prefetch` added on the
TensorFlow side, that is the training loop's wait for input.

Saving the position (the protocol of every tpufeed iterator, for a dataset of passes):
- `tf_ds.get_state()`: the state after the last batch TensorFlow took from the latest pass.
  tf.data's injected prefetch is turned off, so a loop iterating `tf_ds` itself gets the
  state after the batch it holds. Behind `.prefetch()`, a distribution strategy or Keras,
  TensorFlow takes batches ahead: `tf_ds.tpufeed.state_after(n)` is the exact state after
  the first n batches of the pass (the last 1024 are kept). `tpufeed.adapters.keras.
  BackupAndRestore` counts the batches `fit` trained on and uses it.
- `tf_ds.set_state(state)`: the next pass (the next `iter(tf_ds)`, the next Keras epoch
  without `steps_per_epoch`, the next `fit`) starts right after `state`; the passes after
  it start at `to_tf(state=...)` again, and a pass already running is not changed.
- `tf.train.Checkpoint` of an iterator of `tf_ds` raises a `StateError` on save naming these
  calls: tf.data cannot serialize the Python generator underneath (TensorFlow's own error is
  "PyFunc is stateful", which iterators of datasets derived from `tf_ds` still raise).

>>> tf_ds = ds.map(lambda e: (e["image"], e["label"])).batch(32).repeat(5).to_tf()  # doctest: +SKIP
>>> model.fit(tf_ds, epochs=5, steps_per_epoch=batches_per_epoch)                   # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np

from tpufeed.adapters._leaves import describe_path, map_leaves
from tpufeed.adapters._wait_clock import WaitClock
from tpufeed.errors import BatchError, StateError, missing_dependency

__all__ = ["HISTORY", "TfInput", "element_spec", "to_tf"]

HISTORY = 1024  # states kept per pass: more than TensorFlow or Keras ever pull ahead


class TfInput:
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
        return dataclasses.replace(stats, wait_seconds=self.clock.wait_seconds,
                                   wall_seconds=self.clock.wall_seconds or stats.wall_seconds)

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
            raise StateError(f"to_tf: no state after batch {batches!r} of pass {self._passes}; "
                             f"the states kept are those after batches {kept} (up to the last "
                             f"{self._history} TensorFlow took)")

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
        items = pending.iterator if pending.head is _NOTHING else _chain(pending.head, pending.iterator)
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


def to_tf(ds: Any, state: Any = None) -> Any:
    """A `tf.data.Dataset` over `ds` whose passes start after `state` (from the start: None)."""
    _tensorflow()
    first_iterator = ds.iterator(state)
    try:
        start = first_iterator.get_state()
        first = next(first_iterator)
    except StopIteration:
        first_iterator.close()
        raise BatchError(f"to_tf: the pipeline yields nothing, so it has no element_spec: {ds!r}") from None
    except BaseException:
        first_iterator.close()
        raise
    plan = ds._plan()
    fixed_batch = plan.batch.batch_size if plan.batch is not None and plan.batch.drop_remainder \
        and not plan.tail else None
    spec = element_spec(first, fixed_batch)
    tracker = TfInput(ds, state)
    tracker.hold(first_iterator, start, first)  # the first pass goes on from here: no work redone

    def generate() -> Iterator[Any]:
        number, it, items = tracker.start_pass()
        try:
            while True:
                try:
                    item = tracker.clock.call(items.__next__)
                except StopIteration:
                    tracker.ended(number)
                    return
                tracker.took(number, it)
                yield _tuples(map_leaves(_tf_value, item))
        finally:
            it.close()

    from tpufeed.adapters._tf_dataset import TfDataset
    return TfDataset(generate, spec, tracker)


def element_spec(batch: Any, batch_size: int | None = None) -> Any:
    """The `tf.TensorSpec` structure of `batch`: leading dimension `batch_size` (None: any)."""
    tf = _tensorflow()

    def spec(path: str, leaf: Any) -> Any:
        array = leaf if isinstance(leaf, np.ndarray) else np.asarray(leaf)
        shape = list(array.shape)
        if shape and batch_size is not None and shape[0] == batch_size:
            pass
        elif shape:
            shape[0] = None
        if array.dtype.kind in "OSU":
            if array.dtype.kind == "O" and not all(isinstance(v, (bytes, str)) for v in array.flat):
                kinds = sorted({type(v).__name__ for v in array.flat})
                raise BatchError(f"to_tf: batch leaf {describe_path(path)} holds Python objects of "
                                 f"types {kinds}; tf.data takes numbers, booleans, bytes and str")
            return tf.TensorSpec(shape, tf.string)
        try:
            return tf.TensorSpec(shape, tf.as_dtype(array.dtype))
        except TypeError:
            raise BatchError(f"to_tf: batch leaf {describe_path(path)} has numpy dtype "
                             f"{array.dtype}, which TensorFlow cannot hold") from None

    return _tuples(map_leaves(spec, batch))


def _tf_value(path: str, leaf: Any) -> Any:
    array = leaf if isinstance(leaf, np.ndarray) else np.asarray(leaf)
    if array.dtype.kind == "U":
        return np.char.encode(array, "utf-8")
    if array.dtype.kind == "O":
        out = np.empty(array.shape, dtype=object)
        out.flat[:] = [v.encode() if isinstance(v, str) else v for v in array.flat]
        return out
    return array


def _tuples(tree: Any) -> Any:
    """tf.data wants tuples, not lists, for sequence structure."""
    if isinstance(tree, dict):
        return {k: _tuples(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return tuple(_tuples(v) for v in tree)
    if isinstance(tree, tuple) and not hasattr(tree, "_fields"):
        return tuple(_tuples(v) for v in tree)
    return tree


def _chain(head: Any, rest: Iterator[Any]) -> Iterator[Any]:
    yield head
    yield from rest


def _tensorflow() -> Any:
    try:
        import tensorflow as tf
    except ImportError:
        raise missing_dependency("tensorflow", "tf") from None
    return tf

