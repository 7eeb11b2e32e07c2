"""Grain: `MapDataset` (+`mp_prefetch`) and `DataLoader`, on `ArrayRecordDataSource`.

Both use Grain's own global shuffle and Grain's own per-record rng (`random_map`): that is how a
Grain user runs them. Grain's multiprocessing reads absl flags, so `load()` parses them first.

Two settings differ from Grain's defaults: one in Grain's favour, one for a fair measurement.
- the DataLoader reads with `ReadOptions(num_threads=0, prefetch_buffer_size=0)`. Its default
  thread prefetch (16 threads, 500 elements) runs per record, before `Batch`, and grain 0.2.18
  scans the ready part of that buffer on every element (`_measure_prefetch_depth`): measured
  here on W1, ~2k records/s with the defaults against ~14k without read threads;
- MapDataset batches before `to_iter_dataset`, so its prefetch buffer counts batches: the
  default 500 lets each worker compute up to 500 batches (128,000 records, 1.4 GB for W2) ahead
  of the consumer, during the warm-up, which makes the timed passes measure a drained buffer.
  It keeps its 16 threads with a buffer of 16 batches.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from benchmarks.systems import RowSpec
from benchmarks.workloads import BATCH_SIZE, WORKLOADS

MAP_PREFETCH_BATCHES = 16


def load() -> None:
    from absl import flags
    if not flags.FLAGS.is_parsed():
        flags.FLAGS(sys.argv[:1])
    import grain  # noqa: F401


def map_dataset(spec: RowSpec) -> Iterator[Any]:
    import grain

    workload = WORKLOADS[spec.workload]
    source = grain.sources.ArrayRecordDataSource(list(spec.data.array_record))
    ds = grain.MapDataset.source(source).shuffle(seed=spec.seed)
    ds = ds.random_map(workload.fn, seed=spec.seed) if workload.random else ds.map(workload.fn)
    # batch before repeat: each epoch is batched on its own and reshuffled.
    iter_ds = ds.batch(BATCH_SIZE).repeat(spec.epochs).to_iter_dataset(
        grain.ReadOptions(prefetch_buffer_size=MAP_PREFETCH_BATCHES))
    if spec.workers:
        iter_ds = iter_ds.mp_prefetch(grain.MultiprocessingOptions(num_workers=spec.workers))
    yield from _closing(iter(iter_ds))


def data_loader(spec: RowSpec) -> Iterator[Any]:
    import grain

    workload = WORKLOADS[spec.workload]
    fn = workload.fn
    if workload.random:
        class Work(grain.transforms.RandomMap):
            def random_map(self, element: bytes, rng: Any) -> Any:
                return fn(element, rng)
    else:
        class Work(grain.transforms.Map):  # type: ignore[no-redef]
            def map(self, element: bytes) -> Any:
                return fn(element)

    source = grain.sources.ArrayRecordDataSource(list(spec.data.array_record))
    sampler = grain.samplers.IndexSampler(
        num_records=len(source), shard_options=grain.sharding.NoSharding(), shuffle=True,
        num_epochs=spec.epochs, seed=spec.seed)
    loader = grain.DataLoader(data_source=source, sampler=sampler,
                              operations=[Work(), grain.transforms.Batch(BATCH_SIZE)],
                              worker_count=spec.workers, read_options=grain.ReadOptions(
                                  num_threads=0, prefetch_buffer_size=0))
    yield from _closing(iter(loader))


def _closing(it: Iterator[Any]) -> Iterator[Any]:
    """Yields from a Grain iterator, then closes it (its worker processes) if it can be."""
    try:
        yield from it
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
