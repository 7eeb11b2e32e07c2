"""PyTorch DataLoader over the ArrayRecord shards: a map-style Dataset in the limits' order.

The row is the strongest DataLoader set-up measured here (`benchmarks/anchor_variants.py`;
figures in RESULTS.md, "Strongest anchors"): `TorchOptions()`'s defaults. Every variant reads
each record with one `ArrayRecordReader.read(i, i + 1)` (readers opened lazily in the process
that reads, so none crosses a fork), runs the workload's fn with the record's global-index rng,
and delivers `epoch_order`'s records, every epoch exactly once.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.shards import READER_OPTIONS
from benchmarks.systems import RowSpec
from benchmarks.workloads import (
    BATCH_SIZE,
    WORKLOADS,
    Workload,
    epoch_order,
    record_rng,
    stack_batch,
)

_CHOICES = {
    "reads": ("record", "batch"),
    "sampler": ("batch", "index"),
    "collate": ("numpy", "numpy-shm", "default"),
    "start": ("fork", "forkserver", "spawn"),
    "epochs": ("one-iterator", "per-epoch"),
}


@dataclass(frozen=True)
class TorchOptions:
    """How the DataLoader is set up; the defaults are the row.

    reads: "record" (the DataLoader calls `dataset[i]` per index) or "batch" (the Dataset has
      `__getitems__`, which the DataLoader calls once per batch; still one ranged read a record).
    sampler: "batch" (`batch_sampler` of `epoch_order` batches: batches never span epochs) or
      "index" (`sampler` of the same indices + `batch_size`: the last batch of an epoch runs on
      into the next).
    collate: "numpy" (`np.stack` + `torch.from_numpy`; a worker's batch is copied into shared
      memory when sent), "numpy-shm" (in a worker, `np.stack` straight into a shared-memory
      tensor, as `default_collate` does) or "default" (`torch.utils.data.default_collate`).
    start: the workers' multiprocessing start method.
    epochs: "one-iterator" (one sampler covers every epoch) or "per-epoch" (one DataLoader
      iterator per epoch, the usual training loop; `persistent_workers` matters only here).
    """

    reads: str = "record"
    prefetch_factor: int = 4
    persistent_workers: bool = False
    sampler: str = "batch"
    collate: str = "numpy-shm"
    start: str = "fork"
    epochs: str = "one-iterator"

    def __post_init__(self) -> None:
        for name, allowed in _CHOICES.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(f"TorchOptions.{name} must be one of {allowed}, got {value!r}")
        if self.prefetch_factor < 1:
            raise ValueError(
                f"TorchOptions.prefetch_factor must be >= 1, got {self.prefetch_factor}"
            )


def load() -> None:
    import torch  # noqa: F401


class RecordDataset:
    """Map-style: `dataset[i]` reads global record `i` with one ranged read and runs the fn."""

    def __init__(self, workload: Workload, paths: list[str], counts: list[int], seed: int):
        self.workload, self.paths, self.seed = workload, list(paths), seed
        self._ends = list(itertools.accumulate(counts))
        self._readers: list[Any] | None = None  # opened on first read, in the reading process

    def __len__(self) -> int:
        return self._ends[-1]

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        if self._readers is None:
            self._readers = self._open()
        shard = bisect.bisect_right(self._ends, index)
        local = index - (self._ends[shard - 1] if shard else 0)
        record = self._readers[shard].read(local, local + 1)[0]
        if self.workload.random:
            return self.workload.fn(record, record_rng(self.seed, index))
        return self.workload.fn(record)

    def _open(self) -> list[Any]:
        from array_record.python.array_record_module import ArrayRecordReader

        return [ArrayRecordReader(path, READER_OPTIONS) for path in self.paths]

    def __getstate__(self) -> dict[str, Any]:  # readers never cross a process boundary
        return {**self.__dict__, "_readers": None}


class BatchedDataset(RecordDataset):
    """The same reads, asked for a batch at a time: the DataLoader calls `__getitems__`."""

    def __getitems__(self, indices: list[int]) -> list[dict[str, np.ndarray]]:
        return [self[i] for i in indices]


class EpochBatches:
    """Batch sampler: `epoch_order` cut into batches of `BATCH_SIZE`, for `epochs` epochs from
    `first_epoch` (per-epoch loops move `first_epoch` on between iterators)."""

    def __init__(self, n: int, seed: int, epochs: int, first_epoch: int = 0):
        self.n, self.seed, self.epochs, self.first_epoch = n, seed, epochs, first_epoch

    def __iter__(self) -> Iterator[list[int]]:
        for epoch in range(self.first_epoch, self.first_epoch + self.epochs):
            order = epoch_order(self.n, self.seed, epoch)
            for start in range(0, self.n, BATCH_SIZE):
                yield order[start : start + BATCH_SIZE].tolist()

    def __len__(self) -> int:
        return self.epochs * -(-self.n // BATCH_SIZE)


class EpochIndices(EpochBatches):
    """Sampler: the same records one index at a time (the DataLoader cuts the batches)."""

    def __iter__(self) -> Iterator[int]:  # type: ignore[override]
        for batch in super().__iter__():
            yield from batch

    def __len__(self) -> int:
        return self.epochs * self.n


def collate_numpy(elements: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    """The bare loop's `np.stack`, handed over as tensors without a copy."""
    import torch

    return {key: torch.from_numpy(value) for key, value in stack_batch(elements).items()}


def collate_numpy_shm(elements: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    """`np.stack` into a shared-memory tensor when in a worker, so sending the batch to the
    main process copies nothing (what `default_collate` does for tensors)."""
    import torch
    from torch.utils.data import get_worker_info

    if get_worker_info() is None:
        return collate_numpy(elements)
    out = {}
    for key in elements[0]:
        first = elements[0][key]
        dtype = torch.from_numpy(np.empty(0, first.dtype)).dtype
        tensor = torch.empty((len(elements), *first.shape), dtype=dtype).share_memory_()
        np.stack([e[key] for e in elements], out=tensor.numpy())
        out[key] = tensor
    return out


def batches(spec: RowSpec, options: TorchOptions | None = None) -> Iterator[Any]:
    from torch.utils.data import DataLoader, default_collate

    options = options or TorchOptions()
    kind = BatchedDataset if options.reads == "batch" else RecordDataset
    dataset = kind(
        WORKLOADS[spec.workload], list(spec.data.array_record), list(spec.data.counts), spec.seed
    )
    collate = {"numpy": collate_numpy, "numpy-shm": collate_numpy_shm, "default": default_collate}[
        options.collate
    ]
    per_epoch = options.epochs == "per-epoch"
    sampler_epochs = 1 if per_epoch else spec.epochs
    if options.sampler == "batch":
        sampler: EpochBatches = EpochBatches(spec.data.records, spec.seed, sampler_epochs)
        order = {"batch_sampler": sampler}
    else:
        sampler = EpochIndices(spec.data.records, spec.seed, sampler_epochs)
        order = {"sampler": sampler, "batch_size": BATCH_SIZE}
    parallel: dict[str, Any] = {}
    if spec.workers:
        parallel = {
            "prefetch_factor": options.prefetch_factor,
            "persistent_workers": options.persistent_workers,
            "multiprocessing_context": options.start,
        }
    loader = DataLoader(dataset, num_workers=spec.workers, collate_fn=collate, **order, **parallel)
    for epoch in range(spec.epochs if per_epoch else 1):
        sampler.first_epoch = epoch
        it = iter(loader)
        try:
            yield from it
        finally:
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None and not options.persistent_workers:
                shutdown()
    if options.persistent_workers and spec.workers:
        loader._iterator._shutdown_workers()
