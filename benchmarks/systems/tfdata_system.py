"""tf.data over TFRecords of the same bytes: the same Python fn via `tf.numpy_function`, and the
work rewritten in TF ops as a reference.

TFRecords are read sequentially, so tf.data cannot shuffle globally: shard order is reshuffled
each epoch, the 8 shards are interleaved, and a 10,000-record buffer shuffles within a window.
That is lighter I/O than the other systems' global shuffle; the rows say so. Each record's
global index comes from `enumerate(shard start)`, so the rng per record is the same as the bare
loop's. "0 workers" is sequential interleave and map with no prefetch; N workers is
`num_parallel_calls=N` for both and `prefetch(2)`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from benchmarks.systems import RowSpec
from benchmarks.workloads import BATCH_SIZE, WORKLOADS, record_rng

SHUFFLE_BUFFER = 10_000


def load() -> None:
    import tensorflow  # noqa: F401


def numpy_function(spec: RowSpec) -> Iterator[Any]:
    import tensorflow as tf

    workload = WORKLOADS[spec.workload]
    fn, key, seed = workload.fn, workload.key, spec.seed
    dtype = tf.as_dtype(workload.out_dtype)

    if workload.random:

        def work(index: np.int64, record: bytes) -> np.ndarray:
            return fn(record, record_rng(seed, int(index)))[key]
    else:

        def work(index: np.int64, record: bytes) -> np.ndarray:
            return fn(record)[key]

    def element(index: Any, record: Any) -> dict[str, Any]:
        out = tf.numpy_function(work, [index, record], dtype)
        return {key: tf.ensure_shape(out, workload.out_shape)}

    return _run(tf, spec, element)


def tf_ops(spec: RowSpec) -> Iterator[Any]:
    import tensorflow as tf

    workload = WORKLOADS[spec.workload]
    if workload.name == "W1":

        def element(index: Any, record: Any) -> dict[str, Any]:
            return {"x": tf.ensure_shape(tf.io.decode_raw(record, tf.uint8), [1024])}
    else:
        element = _augment_w2_ops(tf, spec.seed)
    return _run(tf, spec, element)


def _augment_w2_ops(tf: Any, seed: int) -> Any:
    """`augment_w2` in TF ops, with stateless random numbers keyed by (seed, record index)."""
    mean = tf.constant([0.49, 0.48, 0.45], tf.float32)
    std = tf.constant([0.25, 0.24, 0.26], tf.float32)

    def element(index: Any, record: Any) -> dict[str, Any]:
        image = tf.reshape(tf.io.decode_raw(record, tf.uint8), [32, 32, 3])
        padded = tf.pad(image, [[2, 2], [2, 2], [0, 0]], mode="REFLECT")
        draws = tf.random.stateless_uniform(
            [3], seed=tf.stack([tf.constant(seed, tf.int64), index])
        )
        offsets = tf.cast(draws[:2] * 5.0, tf.int32)
        crop = tf.slice(padded, [offsets[0], offsets[1], 0], [32, 32, 3])
        crop = tf.where(draws[2] < 0.5, tf.reverse(crop, [1]), crop)
        pixels = tf.cast(crop, tf.float32)
        blurred = (pixels[:-2, :-2] + pixels[1:-1, 1:-1] + pixels[2:, 2:]) * (1.0 / (3 * 255))
        return {"image": (blurred - mean) / std}

    return element


def _run(tf: Any, spec: RowSpec, element: Any) -> Iterator[Any]:
    parallel = spec.workers or None
    starts = np.concatenate([[0], np.cumsum(spec.data.counts)[:-1]]).astype(np.int64)
    shards = tf.data.Dataset.from_tensor_slices((list(spec.data.tfrecord), starts))
    shards = shards.shuffle(len(starts), seed=spec.seed, reshuffle_each_iteration=True)
    records = shards.repeat(spec.epochs).interleave(
        lambda path, start: tf.data.TFRecordDataset(path).enumerate(start),
        cycle_length=len(starts),
        block_length=1,
        num_parallel_calls=parallel,
        deterministic=True,
    )
    ds = records.shuffle(SHUFFLE_BUFFER, seed=spec.seed, reshuffle_each_iteration=True)
    ds = ds.map(element, num_parallel_calls=parallel, deterministic=True).batch(BATCH_SIZE)
    if parallel:
        ds = ds.prefetch(2)
    return iter(ds)
