"""Grain: `MapDataset` (+`mp_prefetch`) and `DataLoader`, on `ArrayRecordDataSource`.

Both use Grain's own global shuffle and Grain's own per-record rng (`random_map`): that is how a
Grain user runs them. Grain's multiprocessing reads absl flags, so `load()` parses them first.
`ArrayRecordDataSource` opens its readers with `readahead_buffer_size:0` whatever
`reader_options` say (it prepends it), and reads one record with `reader.read([i])`.

The rows use `GrainOptions()`'s defaults, the strongest set-ups measured with
`benchmarks/anchor_variants.py` (RESULTS.md, "Strongest anchors"). They differ from Grain's
defaults, in Grain's favour or for a fair measurement:
- both read with `ReadOptions(num_threads=0, prefetch_buffer_size=0)`. The DataLoader's default
  thread prefetch (16 threads, 500 elements) runs per record, before `Batch`, and grain 0.2.18
  scans the ready part of that buffer on every element (`_measure_prefetch_depth`). For
  MapDataset, reading in the consuming thread measured 1.6x (W1) and 2.8x (W2) the rate of 16
  read threads with 0 workers, and 1.14x and 1.07x with 2 workers (session 16);
- MapDataset batches before `to_iter_dataset`, so a prefetch buffer there would count batches:
  the default 500 lets each worker compute up to 500 batches (128,000 records, 1.4 GB for W2)
  ahead of the consumer, during the warm-up, which makes the timed passes measure a drained
  buffer.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from benchmarks.systems import RowSpec
from benchmarks.workloads import BATCH_SIZE, WORKLOADS


@dataclass(frozen=True)
class GrainOptions:
    """How the Grain pipeline is set up; the defaults are the rows.

    read_threads, read_buffer: `ReadOptions(num_threads, prefetch_buffer_size)` (MapDataset:
      counted in batches when `batch_after` is "map", in records when "iter").
    worker_buffer: `MultiprocessingOptions.per_worker_buffer_size` / the DataLoader's
      `worker_buffer_size`, in batches.
    batch_after: MapDataset only: "map" (`MapDataset.batch`, each epoch batched on its own, a
      thread reads a whole batch) or "iter" (`to_iter_dataset(...).batch`: threads read single
      records, batches run on across epochs).
    reader_options: extra array_record reader options, as `ArrayRecordDataSource` takes them.
    """

    read_threads: int = 0
    read_buffer: int = 0
    worker_buffer: int = 1
    batch_after: str = "map"
    reader_options: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.batch_after not in ("map", "iter"):
            raise ValueError(
                f"GrainOptions.batch_after must be 'map' or 'iter', got {self.batch_after!r}"
            )
        for name in ("read_threads", "read_buffer", "worker_buffer"):
            if getattr(self, name) < 0:
                raise ValueError(f"GrainOptions.{name} must be >= 0, got {getattr(self, name)}")


LOADER_OPTIONS = GrainOptions()


def load() -> None:
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS(sys.argv[:1])
    import grain  # noqa: F401


def _source(spec: RowSpec, options: GrainOptions) -> Any:
    import grain

    return grain.sources.ArrayRecordDataSource(
        list(spec.data.array_record), dict(options.reader_options) or None
    )


def map_dataset(spec: RowSpec, options: GrainOptions | None = None) -> Iterator[Any]:
    import grain

    options = options or GrainOptions()
    workload = WORKLOADS[spec.workload]
    ds = grain.MapDataset.source(_source(spec, options)).shuffle(seed=spec.seed)
    ds = ds.random_map(workload.fn, seed=spec.seed) if workload.random else ds.map(workload.fn)
    read = grain.ReadOptions(
        num_threads=options.read_threads, prefetch_buffer_size=options.read_buffer
    )
    if options.batch_after == "map":
        # batch before repeat: each epoch is batched on its own and reshuffled.
        iter_ds = ds.batch(BATCH_SIZE).repeat(spec.epochs).to_iter_dataset(read)
    else:
        iter_ds = ds.repeat(spec.epochs).to_iter_dataset(read).batch(BATCH_SIZE)
    if spec.workers:
        iter_ds = iter_ds.mp_prefetch(
            grain.MultiprocessingOptions(
                num_workers=spec.workers, per_worker_buffer_size=options.worker_buffer
            )
        )
    yield from _closing(iter(iter_ds))


def data_loader(spec: RowSpec, options: GrainOptions | None = None) -> Iterator[Any]:
    import grain

    options = options or LOADER_OPTIONS
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

    source = _source(spec, options)
    sampler = grain.samplers.IndexSampler(
        num_records=len(source),
        shard_options=grain.sharding.NoSharding(),
        shuffle=True,
        num_epochs=spec.epochs,
        seed=spec.seed,
    )
    loader = grain.DataLoader(
        data_source=source,
        sampler=sampler,
        operations=[Work(), grain.transforms.Batch(BATCH_SIZE)],
        worker_count=spec.workers,
        worker_buffer_size=options.worker_buffer,
        read_options=grain.ReadOptions(
            num_threads=options.read_threads, prefetch_buffer_size=options.read_buffer
        ),
    )
    yield from _closing(iter(loader))


def _closing(it: Iterator[Any]) -> Iterator[Any]:
    """Yields from a Grain iterator, then closes it (its worker processes) if it can be."""
    try:
        yield from it
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
