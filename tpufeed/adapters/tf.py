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

>>> tf_ds = ds.map(lambda e: (e["image"], e["label"])).batch(32).repeat(5).to_tf()  # doctest: +SKIP
>>> model.fit(tf_ds, epochs=5, steps_per_epoch=batches_per_epoch)                   # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np

from tpufeed.adapters._leaves import describe_path, map_leaves
from tpufeed.adapters._wait_clock import WaitClock
from tpufeed.errors import BatchError, missing_dependency

__all__ = ["TfInput", "element_spec", "to_tf"]


class TfInput:
    """The input side of the latest pass over a `to_tf()` dataset: its wait and statistics."""

    def __init__(self) -> None:
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


def to_tf(ds: Any, state: dict[str, Any] | None = None) -> Any:
    """A `tf.data.Dataset` over `ds` (starting after `state` when given)."""
    tf = _tensorflow()
    first_iterator = ds.iterator(state)
    try:
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
    peeked = [(first_iterator, first)]
    tracker = TfInput()

    def generate() -> Iterator[Any]:
        # The first pass reuses the iterator that produced the spec's batch: no work is redone.
        if peeked:
            it, head = peeked.pop()
            items: Iterator[Any] = _chain(head, it)
        else:
            it = ds.iterator(state)
            items = it
        tracker.clock, tracker.iterator = WaitClock(), it
        try:
            while True:
                try:
                    item = tracker.clock.call(items.__next__)
                except StopIteration:
                    return
                yield _tuples(map_leaves(_tf_value, item))
        finally:
            it.close()

    tf_ds = tf.data.Dataset.from_generator(generate, output_signature=spec)
    tf_ds.tpufeed = tracker
    return tf_ds


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

