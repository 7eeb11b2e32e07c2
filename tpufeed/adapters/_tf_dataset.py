"""The `tf.data.Dataset` that `to_tf` returns: get_state/set_state, and a clear refusal of
`tf.train.Checkpoint`.

tf.data cannot serialize the Python generator underneath (`from_generator` runs a stateful
py-function), so TensorFlow's own checkpoint of the iterator fails with "PyFunc is stateful".
The iterators of this dataset raise a `StateError` there instead, naming the tpufeed API that
saves the position. Iterators of a dataset derived from it (`tf_ds.map(...)`, `.prefetch(...)`)
are TensorFlow's own and fail TensorFlow's way.

This module imports TensorFlow (and two of its internal classes); `to_tf` loads it on use.
"""

from __future__ import annotations

import atexit
import gc
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf
from tensorflow.python.data.ops import dataset_ops, iterator_ops
from tensorflow.python.framework import ops

from tpufeed.adapters._tf_input import TfInput
from tpufeed.errors import StateError
from tpufeed.run.state_names import TorchStateNames

__all__ = ["CHECKPOINT_REFUSED", "TfDataset"]

_AT_EXIT: list[bool] = []  # whether the exit hook is registered (on the first iterator)

CHECKPOINT_REFUSED = (
    "to_tf: tf.train.Checkpoint cannot save the iterator of a tpufeed dataset (tf.data cannot "
    "serialize the Python generator that feeds it). Save the data position with tpufeed "
    "instead: `tf_ds.get_state()` (JSON-able; `tf_ds.tpufeed.state_after(batches)` when "
    "TensorFlow pulls ahead) next to your checkpoint, and `tf_ds.set_state(state)` before the "
    "next pass; with Keras, the callback `tpufeed.adapters.keras.BackupAndRestore(tf_ds, dir)` "
    "does both. Leave the iterator out of tf.train.Checkpoint."
)


class TfDataset(TorchStateNames, dataset_ops.UnaryUnchangedStructureDataset):
    """A `tf.data.Dataset` over a tpufeed pipeline whose position is saved with tpufeed's
    `get_state()` and restored with `set_state(state)` at the start of the next pass
    (`state_dict()` / `load_state_dict(state)`: the same under torch's names).

    Its `cardinality()` is the batches of a whole pass where tpufeed knows them (asserted,
    so datasets made from it know it too). A pass started mid-epoch by `set_state` is
    shorter: iterating this dataset itself (as Keras does) reads it without the assertion.

    >>> state = tf_ds.get_state(); tf_ds.set_state(state)   # doctest: +SKIP
    """

    def __init__(self, generate: Callable[[], Iterator[Any]], spec: Any, tracker: TfInput):
        options = tf.data.Options()
        options.experimental_optimization.inject_prefetch = False  # so nothing is taken ahead
        inner = tf.data.Dataset.from_generator(generate, output_signature=spec).with_options(
            options
        )
        counted = inner
        if tracker.cardinality is not None:
            counted = inner.apply(tf.data.experimental.assert_cardinality(tracker.cardinality))
        super().__init__(counted, counted._variant_tensor)
        self._uncounted = inner
        self.tpufeed = tracker
        _release_at_exit()

    def get_state(self) -> dict[str, Any]:
        """The state after the last batch TensorFlow took from the latest pass (before the
        first pass and after `set_state`: where the next pass starts). Exact for a loop that
        iterates this dataset itself; behind `.prefetch()` or a distribution strategy, use
        `tpufeed.state_after(batches_consumed)`, and with Keras the callback."""
        return self.tpufeed.get_state()

    def set_state(self, state: Any) -> None:
        """The next pass (the next `iter()`, Keras epoch or `fit`) starts right after `state`;
        the passes after it start where `to_tf(state=...)` says. A running pass goes on."""
        self.tpufeed.set_state(state)

    def __iter__(self) -> iterator_ops.OwnedIterator:
        if not (tf.executing_eagerly() or ops.inside_function()):
            return super().__iter__()  # TensorFlow's own error for graph mode
        whole = self.tpufeed.next_pass_whole()
        with ops.colocate_with(self._variant_tensor):
            return _Iterator(self if whole else self._uncounted)


class _Iterator(iterator_ops.OwnedIterator):
    """TensorFlow's iterator, except that saving it says which tpufeed API to use."""

    def _serialize_to_tensors(self) -> Any:
        raise StateError(CHECKPOINT_REFUSED)

    def _save(self) -> Any:
        raise StateError(CHECKPOINT_REFUSED)


def _release_at_exit() -> None:
    """Has TensorFlow's iterators released when the process exits, if still alive then. Left
    to the interpreter's own teardown, TensorFlow finalizes the generator under a tpufeed
    dataset after Python has stopped, and logs "Error occurred when finalizing
    GeneratorDataset iterator: FAILED_PRECONDITION: Python interpreter state is not
    initialized" at the exit of a loop that stopped early."""
    if not _AT_EXIT:
        _AT_EXIT.append(True)
        atexit.register(_release_live)


def _release_live() -> None:
    """Drops each live iterator's resource handle, its last reference: TensorFlow deletes the
    iterator now and runs the generator's finalizer while Python can still run it. Iterators
    of datasets made from a tpufeed one (`tf_ds.map(...).prefetch(...)`, Keras's) are
    TensorFlow's own, so every live one is released: the process is ending."""
    for found in gc.get_objects():
        if isinstance(found, iterator_ops.OwnedIterator):
            found.__dict__.pop("_iterator_resource", None)
