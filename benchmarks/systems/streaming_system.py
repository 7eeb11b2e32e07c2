"""MosaicML Streaming: `StreamingDataset` over the W1 records written by its own MDSWriter, its
samples batched by a torch `DataLoader` of the same worker budget.

Runs under the python of Streaming's own environment (`TPUFEED_STREAMING_PYTHON`; Streaming
pins numpy < 2.2). The set-up is the strongest measured (`TPUFEED_BENCH_STREAMING` picks
another for a sweep: `algo[,predownload[,block]]`, e.g. `py1e` or `py1br,64,1000000`; the
variants and their figures are in RESULTS.md): the `naive` shuffle (a global permutation, like
tpufeed's, and the fastest of Streaming's on local shards: 2-3x its default `py1e` at 2
workers), the default predownload (the shards are local: nothing is downloaded), the
workload's fn on the sample's `record` bytes in the dataset's `get_item` (in the DataLoader's
workers), and the torch row's collate (`np.stack` into shared memory). `py1s` is not
comparable: it pads each epoch with repeated samples (50,048 of 50,000).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from benchmarks.systems import RowSpec
from benchmarks.systems.torch_system import collate_numpy_shm
from benchmarks.workloads import BATCH_SIZE, WORKLOADS

DEFAULT = "naive"


def load() -> None:
    import streaming  # noqa: F401
    import torch  # noqa: F401


def _settings() -> dict[str, Any]:
    parts = os.environ.get("TPUFEED_BENCH_STREAMING", DEFAULT).split(",")
    settings: dict[str, Any] = {"shuffle_algo": parts[0]}
    if len(parts) > 1 and parts[1]:
        settings["predownload"] = int(parts[1])
    if len(parts) > 2 and parts[2]:
        settings["shuffle_block_size"] = int(parts[2])
    return settings


def _dataset_class() -> Any:
    from streaming import StreamingDataset

    class WorkloadDataset(StreamingDataset):
        """Each sample through the workload's fn, in whichever process reads it."""

        def __init__(self, workload: str, **kwargs: Any):
            super().__init__(**kwargs)
            self.fn = WORKLOADS[workload].fn

        def get_item(self, idx: int, retry: int = 7) -> Any:
            return self.fn(super().get_item(idx, retry)["record"])

    return WorkloadDataset


def batches(spec: RowSpec) -> Iterator[Any]:
    from streaming.base.util import clean_stale_shared_memory
    from torch.utils.data import DataLoader

    if not spec.data.mds:
        raise ValueError("the data has no MDS folder: datafiles.write_mds(...)")
    clean_stale_shared_memory()
    dataset = _dataset_class()(
        spec.workload,
        local=spec.data.mds,
        shuffle=True,
        shuffle_seed=spec.seed,
        batch_size=BATCH_SIZE,
        **_settings(),
    )
    parallel = {"persistent_workers": True, "prefetch_factor": 4} if spec.workers else {}
    loader = DataLoader(
        dataset,
        batch_size=BATCH_SIZE,
        num_workers=spec.workers,
        collate_fn=collate_numpy_shm,
        **parallel,
    )
    for _ in range(spec.epochs):  # each pass over the loader is one of Streaming's epochs
        yield from loader
