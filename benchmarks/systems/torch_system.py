"""PyTorch DataLoader over the ArrayRecord shards: a map-style Dataset with `__getitems__`
(batched reads), a batch sampler giving the limits' shuffled order, and `np.stack` collation
into tensors (`torch.from_numpy`, so worker batches travel in shared memory).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from benchmarks.shards import ShardReader
from benchmarks.systems import RowSpec
from benchmarks.workloads import (BATCH_SIZE, WORKLOADS, Workload, batch_indices, stack_batch,
                                  transform_records)


def load() -> None:
    import torch  # noqa: F401


class ArrayRecordDataset:
    """Map-style: `dataset[i]` and the batched `dataset.__getitems__([i, ...])`."""

    def __init__(self, workload: Workload, reader: ShardReader, seed: int):
        self.workload, self.reader, self.seed = workload, reader, seed

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: list[int]) -> list[dict[str, np.ndarray]]:
        records = self.reader.read(indices)
        return transform_records(self.workload, records, indices, self.seed)


class EpochBatches:
    """Batch sampler: the limits' per-epoch orders, cut into batches of `BATCH_SIZE`."""

    def __init__(self, n: int, seed: int, epochs: int):
        self.n, self.seed, self.epochs = n, seed, epochs

    def __iter__(self) -> Iterator[list[int]]:
        return (b.tolist() for b in batch_indices(self.n, self.seed, self.epochs))

    def __len__(self) -> int:
        return self.epochs * -(-self.n // BATCH_SIZE)


def collate(elements: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    import torch
    return {key: torch.from_numpy(value) for key, value in stack_batch(elements).items()}


def batches(spec: RowSpec) -> Iterator[Any]:
    from torch.utils.data import DataLoader

    dataset = ArrayRecordDataset(WORKLOADS[spec.workload],
                                 ShardReader(spec.data.array_record, spec.data.counts), spec.seed)
    loader = DataLoader(dataset, batch_sampler=EpochBatches(spec.data.records, spec.seed, spec.epochs),
                        num_workers=spec.workers, collate_fn=collate)
    it = iter(loader)
    try:
        yield from it
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
