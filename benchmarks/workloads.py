"""The benchmark workloads, defined once: records, per-record work, order and per-record rngs.

Every system runs literally these functions. The record order for the limits and PyTorch is
`epoch_order`; tpufeed and Grain shuffle globally with their own permutation of the same seed
(any uniform permutation reads the shards the same way).

>>> decode_w1(bytes(1024))["x"].shape
(1024,)
>>> augment_w2(bytes(3072), record_rng(0, 7))["image"].shape
(30, 30, 3)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

BATCH_SIZE = 256
SEED = 0

_W2_SIDE = 32
_W2_PAD = 2
_W2_OUT = _W2_SIDE - 2  # the 3-tap diagonal blur drops one pixel at each edge
_W2_MEAN = np.array([0.49, 0.48, 0.45], np.float32)
_W2_STD = np.array([0.25, 0.24, 0.26], np.float32)
_W2_SCALE = np.float32(1.0 / (3 * 255))


def decode_w1(record: bytes) -> dict[str, np.ndarray]:
    """W1: the record's bytes as `{"x": uint8[1024]}` (a view; stacking copies it)."""
    return {"x": np.frombuffer(record, np.uint8)}


def augment_w2(record: bytes, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """W2: reflect-pad 2, random 32x32 crop, random h-flip, 3-tap diagonal blur, normalise."""
    image = np.frombuffer(record, np.uint8).reshape(_W2_SIDE, _W2_SIDE, 3)
    padded = np.pad(image, ((_W2_PAD, _W2_PAD), (_W2_PAD, _W2_PAD), (0, 0)), mode="reflect")
    dy, dx = rng.integers(0, 2 * _W2_PAD + 1, size=2)
    crop = padded[dy : dy + _W2_SIDE, dx : dx + _W2_SIDE]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    pixels = crop.astype(np.float32)
    blurred = (pixels[:-2, :-2] + pixels[1:-1, 1:-1] + pixels[2:, 2:]) * _W2_SCALE
    return {"image": (blurred - _W2_MEAN) / _W2_STD}


@dataclass(frozen=True)
class Workload:
    """What a workload's records are and what is done to each; `random` fns take an rng."""

    name: str
    summary: str
    default_records: int
    record_bytes: int
    fn: Callable[..., dict[str, np.ndarray]]
    random: bool
    key: str
    out_shape: tuple[int, ...]
    out_dtype: str

    def make_records(self, rng: np.random.Generator, count: int) -> list[bytes]:
        """`count` records of random bytes (W2's are random 32x32x3 uint8 images)."""
        block = rng.integers(0, 256, size=(count, self.record_bytes), dtype=np.uint8)
        return [row.tobytes() for row in block]


WORKLOADS = {
    "W1": Workload(
        name="W1",
        summary="read-bound: 1 KiB random bytes -> {'x': uint8[1024]}",
        default_records=200_000,
        record_bytes=1024,
        fn=decode_w1,
        random=False,
        key="x",
        out_shape=(1024,),
        out_dtype="uint8",
    ),
    "W2": Workload(
        name="W2",
        summary="Python-transform-bound: 32x32x3 uint8 -> augment -> float32[30,30,3]",
        default_records=100_000,
        record_bytes=_W2_SIDE * _W2_SIDE * 3,
        fn=augment_w2,
        random=True,
        key="image",
        out_shape=(_W2_OUT, _W2_OUT, 3),
        out_dtype="float32",
    ),
}


class _RngCache(threading.local):
    """One Philox generator per (thread, seed); tf.data runs numpy_function on several threads."""

    def __init__(self) -> None:
        self.by_seed: dict[int, tuple[np.random.Philox, np.random.Generator, dict[str, Any]]] = {}


_RNGS = _RngCache()


def record_rng(seed: int, index: int) -> np.random.Generator:
    """The generator of record `index`: Philox keyed by `seed`, counter set to the index.

    Resetting a cached Philox costs ~2 µs per record, like tpufeed's `random_map` and Grain's
    `MapDataset.random_map`; `np.random.default_rng((seed, index))` would cost ~13 µs. The
    returned generator is reused by the next call on the same thread.
    """
    entry = _RNGS.by_seed.get(seed)
    if entry is None:
        bitgen = np.random.Philox(key=seed)
        state = bitgen.state
        state["state"]["counter"] = np.zeros(4, np.uint64)
        entry = _RNGS.by_seed[seed] = (bitgen, np.random.Generator(bitgen), state)
    bitgen, generator, state = entry
    state["state"]["counter"][3] = index
    state["buffer_pos"] = 4  # discard buffered output of the previous record
    state["has_uint32"] = 0
    bitgen.state = state
    return generator


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    """The shuffled record order of one epoch for the limits and PyTorch."""
    return np.random.default_rng((seed, epoch)).permutation(n)


def batch_indices(n: int, seed: int, epochs: int) -> Iterator[np.ndarray]:
    """Index batches of `BATCH_SIZE` for `epochs` epochs; batches never span epochs."""
    for epoch in range(epochs):
        order = epoch_order(n, seed, epoch)
        for start in range(0, n, BATCH_SIZE):
            yield order[start : start + BATCH_SIZE]


def transform_records(
    workload: Workload, records: Sequence[bytes], indices: Sequence[int], seed: int
) -> list[dict[str, np.ndarray]]:
    """The per-record work of a batch, for the bare loop and the frameworks without their own
    per-record rng (PyTorch); `indices` are the records' global indices."""
    fn = workload.fn
    if workload.random:
        return [fn(record, record_rng(seed, i)) for record, i in zip(records, indices)]
    return [fn(record) for record in records]


def stack_batch(elements: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The bare loop's (and PyTorch's) stacking: one `np.stack` per key."""
    return {key: np.stack([e[key] for e in elements]) for key in elements[0]}
