"""WebDataset's own pipeline over the same records written by `webdataset.TarWriter`: the anchor
of the `tpufeed-tar` row (`Dataset.from_webdataset` on the same shards).

The row is WebDataset as its documentation sets it up for training (`WdsOptions`' defaults;
other shuffle buffers and prefetch depths through $TPUFEED_BENCH_WDS_SHUFFLE and
$TPUFEED_BENCH_WDS_PREFETCH; no sweep recorded yet, figures in RESULTS.md, "WebDataset shards"):
shards shuffled (`shardshuffle` = the shard count, seeded), split among
the DataLoader's workers by WebDataset itself, samples shuffled in a buffer, the workload's fn,
then `batched(256)` in the worker with the limits' `np.stack`; with N workers, a
`torch.utils.data.DataLoader(batch_size=None, num_workers=N, persistent_workers=True)` over
it, one iterator per epoch (the usual training loop). WebDataset gives no global shuffle: a
buffer of `shuffle` samples within each worker's stream of shards.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from benchmarks.systems import RowSpec
from benchmarks.workloads import BATCH_SIZE, WORKLOADS, record_rng, stack_batch


@dataclass(frozen=True)
class WdsOptions:
    """shuffle: the sample buffer (WebDataset's docs use 1,000-5,000); prefetch_factor: the
    DataLoader's batches ahead per worker."""

    shuffle: int = int(os.environ.get("TPUFEED_BENCH_WDS_SHUFFLE", "1000"))
    prefetch_factor: int = int(os.environ.get("TPUFEED_BENCH_WDS_PREFETCH", "4"))


def load() -> None:
    import torch  # noqa: F401
    import webdataset  # noqa: F401


def _on_bin(fn: Any, seed: int | None, sample: dict) -> Any:
    """The fn on the sample's record; a random fn gets the record's rng, from its global index
    (the sample's key), as PyTorch's row does."""
    if seed is None:
        return fn(sample["bin"])
    return fn(sample["bin"], record_rng(seed, int(sample["__key__"])))


def _stack(key: str, elements: list[dict]) -> dict:
    """The limits' `np.stack` of the workload's output (WebDataset's `map` puts `__key__` back
    into every dict a fn returns; the batch leaves it out, as the other rows have none)."""
    return stack_batch([{key: e[key]} for e in elements])


def pipeline(spec: RowSpec, options: WdsOptions) -> Any:
    import webdataset as wds

    workload = WORKLOADS[spec.workload]
    paths = list(spec.data.tar)
    if not paths:
        raise ValueError("the data has no tar shards: prepare(..., tar=True)")
    return (
        wds.WebDataset(paths, shardshuffle=len(paths), seed=spec.seed, empty_check=False)
        .shuffle(options.shuffle)
        .map(functools.partial(_on_bin, workload.fn, spec.seed if workload.random else None))
        .batched(BATCH_SIZE, collation_fn=functools.partial(_stack, workload.key), partial=True)
    )


def batches(spec: RowSpec, options: WdsOptions | None = None) -> Iterator[dict]:
    options = options or WdsOptions()
    dataset = pipeline(spec, options)
    if not spec.workers:
        for _ in range(spec.epochs):
            yield from dataset
        return
    import torch

    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=None,
        num_workers=spec.workers,
        persistent_workers=True,
        prefetch_factor=options.prefetch_factor,
    )
    for _ in range(spec.epochs):
        yield from loader
