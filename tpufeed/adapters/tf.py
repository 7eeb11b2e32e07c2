"""`Dataset.to_tf`: the pipeline as a real `tf.data.Dataset`, usable with `model.fit`.

Its `element_spec` is the pipeline's (`Dataset.element_spec`, converted by `to_tf_spec`):
the first record through the functions, the batch dimension fixed where every batch has it
(`drop_remainder=True`, as `tf.data` does; also through maps after `batch`), `None`
otherwise. Bytes and str leaves become `tf.string`.

Each iteration of the returned dataset (each Keras epoch) is the pipeline's next epochs, a new
shuffle and new `random_map` draws each, as `tf.data` reshuffles on every iteration: pass p
runs epochs [p * n, (p + 1) * n) of a pipeline that `.repeat(n)`s (n = 1 by default), the same
on every run (`tpufeed.adapters._tf_passes`). A pipeline that repeats forever is one endless
pass, and a mixture's passes start alike: a second pass repeats the first, with a warning.

Its `cardinality()` (and so `len()`) is the batches of a pass where `len(ds)` is known (an
endless pass: infinite), asserted so that datasets made from it keep it, and Keras runs each
epoch to its end without "Your input ran out of data". Unknown where the data decides the
counts (`filter`, `flat_map`, `pack` without `batch`, a mixture), or where the first pass
starts mid-epoch (`to_tf(state=...)`).

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
  without `steps_per_epoch`, the next `fit`) starts right after `state` and runs to the end of
  its group of n epochs; the passes after it go on from there. A pass already running is not
  changed. A pass set mid-epoch is shorter than `cardinality()`: iterate `tf_ds` itself there
  (Keras does), as datasets made from it assert the whole length.
- `tf.train.Checkpoint` of an iterator of `tf_ds` raises a `StateError` on save naming these
  calls: tf.data cannot serialize the Python generator underneath (TensorFlow's own error is
  "PyFunc is stateful", which iterators of datasets derived from `tf_ds` still raise).

>>> tf_ds = ds.map(lambda e: (e["image"], e["label"])).batch(32, drop_remainder=True).to_tf()  # doctest: +SKIP
>>> model.fit(tf_ds, epochs=5, validation_data=val.to_tf())  # each epoch the next, reshuffled  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from tpufeed.adapters._leaves import describe_path, map_leaves
from tpufeed.adapters._tensorflow import import_tensorflow
from tpufeed.adapters._tf_input import HISTORY, TfInput
from tpufeed.errors import BatchError
from tpufeed.run.element_spec import TensorSpec, spec_of

__all__ = ["HISTORY", "TfInput", "element_spec", "to_tf", "to_tf_spec"]


def to_tf(ds: Any, state: Any = None) -> Any:
    """A `tf.data.Dataset` over `ds`; its first pass starts after `state` (None: the start)."""
    import_tensorflow()
    spec = to_tf_spec(ds.element_spec)
    tracker = TfInput(ds, state)

    def generate() -> Iterator[Any]:
        items = tracker.items()
        try:
            for item in items:
                yield _tuples(map_leaves(_tf_value, item))
        finally:
            items.close()

    from tpufeed.adapters._tf_dataset import TfDataset

    return TfDataset(generate, spec, tracker)


def to_tf_spec(spec: Any) -> Any:
    """The `tf.TensorSpec` structure of a `Dataset.element_spec` (lists become tuples)."""
    tf = import_tensorflow()

    def convert(path: str, leaf: TensorSpec) -> Any:
        if leaf.dtype.kind in "SU":
            return tf.TensorSpec(leaf.shape, tf.string)
        if leaf.dtype.kind == "O":
            raise BatchError(
                f"to_tf: leaf {describe_path(path)} holds Python objects (numpy dtype object); "
                "tf.data takes numbers, booleans, bytes and str: convert it in a map()"
            )
        try:
            return tf.TensorSpec(leaf.shape, tf.as_dtype(leaf.dtype))
        except TypeError:
            raise BatchError(
                f"to_tf: leaf {describe_path(path)} has numpy dtype "
                f"{leaf.dtype}, which TensorFlow cannot hold"
            ) from None

    return _tuples(map_leaves(convert, spec))


def element_spec(batch: Any, batch_size: int | None = None) -> Any:
    """The `tf.TensorSpec` structure of `batch`: leading dimension `batch_size` (None: any)."""

    def lead(spec: TensorSpec) -> TensorSpec:
        if not spec.shape or spec.shape[0] == batch_size:
            return spec
        return TensorSpec((None, *spec.shape[1:]), spec.dtype)

    return to_tf_spec(map_leaves(lambda path, leaf: lead(leaf), spec_of(batch)))


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
