"""tpufeed: `Dataset.from_array_record(...).shuffle().map/random_map().batch(256)`."""

from __future__ import annotations

from collections.abc import Iterator

from benchmarks.systems import RowSpec
from benchmarks.workloads import BATCH_SIZE, WORKLOADS


def load() -> None:
    import tpufeed  # noqa: F401


def has_workers() -> bool:
    """Whether this tpufeed has the worker engine (`Dataset.workers`)."""
    import tpufeed
    return hasattr(tpufeed.Dataset, "workers")


def batches(spec: RowSpec, workers: int | str | None = None, prefetch: int | str = 0) -> Iterator[dict]:
    import tpufeed

    workload = WORKLOADS[spec.workload]
    ds = tpufeed.Dataset.from_array_record(list(spec.data.array_record)).shuffle(spec.seed)
    # random_map hands the same fn a per-record numpy Generator (a Philox counter reset).
    ds = ds.random_map(workload.fn) if workload.random else ds.map(workload.fn)
    ds = ds.batch(BATCH_SIZE).repeat(spec.epochs).prefetch(prefetch)
    workers = spec.workers if workers is None else workers
    if workers:
        ds = ds.workers(workers)
    it = iter(ds)
    try:
        yield from it
    finally:
        it.close()


def batches_auto(spec: RowSpec) -> Iterator[dict]:
    """tpufeed choosing its own worker count and prefetch depth (issue 7's "auto" row)."""
    yield from batches(spec, workers="auto", prefetch="auto")
