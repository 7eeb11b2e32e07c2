"""tpufeed: `Dataset.from_array_record(...).shuffle().map/random_map().batch(256)`, and the same
pipeline over the same bytes in Parquet (`from_parquet`) or MDS (`from_mds`), the fn applied to
the `record` column."""

from __future__ import annotations

import functools
import os
import tempfile
import threading
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.systems import RowSpec
from benchmarks.workloads import BATCH_SIZE, WORKLOADS


def load() -> None:
    import tpufeed  # noqa: F401


def has_workers() -> bool:
    """Whether this tpufeed has the worker engine (`Dataset.workers`)."""
    import tpufeed

    return hasattr(tpufeed.Dataset, "workers")


def _on_record(fn: Callable[..., Any], row: dict, *rng: Any) -> Any:
    """The workload's fn on a Parquet row's `record` bytes (module level: workers pickle it)."""
    return fn(row["record"], *rng)


def batches(
    spec: RowSpec,
    workers: int | str | None = None,
    prefetch: int | str = 0,
    parquet: bool = False,
    mds: bool = False,
) -> Iterator[dict]:
    import tpufeed

    workload = WORKLOADS[spec.workload]
    if mds:
        if not spec.data.mds:
            raise ValueError("the data has no MDS folder: datafiles.write_mds(...)")
        ds = tpufeed.Dataset.from_mds(spec.data.mds).shuffle(spec.seed)
        fn = functools.partial(_on_record, workload.fn)
    elif parquet:
        if not spec.data.parquet:
            raise ValueError("the data has no Parquet shards: prepare(..., parquet=True)")
        ds = tpufeed.Dataset.from_parquet(list(spec.data.parquet)).shuffle(spec.seed)
        fn = functools.partial(_on_record, workload.fn)
    else:
        ds = tpufeed.Dataset.from_array_record(list(spec.data.array_record)).shuffle(spec.seed)
        fn = workload.fn
    # random_map hands the same fn a per-record numpy Generator (a Philox counter reset).
    ds = ds.random_map(fn) if workload.random else ds.map(fn)
    ds = ds.batch(BATCH_SIZE).repeat(spec.epochs).prefetch(prefetch)
    workers = spec.workers if workers is None else workers
    if workers:
        ds = ds.workers(workers)
    if os.environ.get("TPUFEED_BENCH_OBSERVE") == "1":  # issue 28's "on": trace + live metrics
        ds = ds.options(trace=os.path.join(_observed_dir(), "run.json"))
    it = iter(ds)
    try:
        yield from it
    finally:
        it.close()


@functools.cache
def _observed_dir() -> str:
    """Where an observed row writes its timeline, once metrics are served and scraped every
    second by a thread of this process (as a Prometheus server would, over HTTP)."""
    import tpufeed

    server = tpufeed.serve_metrics(port=0)
    url = f"http://127.0.0.1:{server.port}/metrics"

    def scrape() -> None:
        while True:
            urllib.request.urlopen(url, timeout=5).read()
            threading.Event().wait(1.0)

    threading.Thread(target=scrape, daemon=True, name="bench scraper").start()
    return tempfile.mkdtemp(prefix="tpufeed-observed-")


def batches_auto(spec: RowSpec) -> Iterator[dict]:
    """tpufeed choosing its own worker count and prefetch depth (issue 7's "auto" row)."""
    yield from batches(spec, workers="auto", prefetch="auto")


def parquet_batches(spec: RowSpec) -> Iterator[dict]:
    """The `batches` pipeline over the same records in Parquet: the read differs, the work not."""
    yield from batches(spec, parquet=True)


def _on_bin(fn: Callable[..., Any], sample: dict, *rng: Any) -> Any:
    """The workload's fn on a WebDataset sample's `bin` member (module level: workers pickle it)."""
    return fn(sample["bin"], *rng)


def tar_batches(spec: RowSpec) -> Iterator[dict]:
    """The `batches` pipeline over the same records in WebDataset tar shards, read in place
    (`from_webdataset`) with a global shuffle: the wds row's data, tpufeed's order."""
    import tpufeed

    workload = WORKLOADS[spec.workload]
    if not spec.data.tar:
        raise ValueError("the data has no tar shards: prepare(..., tar=True)")
    ds = tpufeed.Dataset.from_webdataset(list(spec.data.tar)).shuffle(spec.seed)
    fn = functools.partial(_on_bin, workload.fn)
    ds = ds.random_map(fn) if workload.random else ds.map(fn)
    ds = ds.batch(BATCH_SIZE).repeat(spec.epochs)
    if spec.workers:
        ds = ds.workers(spec.workers)
    it = iter(ds)
    try:
        yield from it
    finally:
        it.close()


def mds_batches(spec: RowSpec) -> Iterator[dict]:
    """The `batches` pipeline over the same records as MDS (MDSWriter's shards, read in place)."""
    yield from batches(spec, mds=True)
