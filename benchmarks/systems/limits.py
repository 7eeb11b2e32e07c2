"""The limits: the raw reader alone, the bare loop (reader + the same work, no framework), and
N bare loops side by side."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from benchmarks.shards import ShardReader
from benchmarks.systems import RowSpec
from benchmarks.workloads import (
    BATCH_SIZE,
    WORKLOADS,
    batch_indices,
    stack_batch,
    transform_records,
)


def load() -> None:
    """Nothing to import beyond numpy and array_record."""


def raw_reader(spec: RowSpec) -> Iterator[list[bytes]]:
    """Batches of raw records in the shuffled order: the read limit."""
    reader = ShardReader(spec.data.array_record, spec.data.counts)
    try:
        for indices in batch_indices(spec.data.records, spec.seed, spec.epochs):
            yield reader.read(indices)
    finally:
        reader.close()


def bare_loop(spec: RowSpec) -> Iterator[dict]:
    """One process, one loop: read a batch, run the per-record work, stack."""
    workload = WORKLOADS[spec.workload]
    reader = ShardReader(spec.data.array_record, spec.data.counts)
    try:
        for indices in batch_indices(spec.data.records, spec.seed, spec.epochs):
            records = reader.read(indices)
            yield stack_batch(transform_records(workload, records, indices.tolist(), spec.seed))
    finally:
        reader.close()


def bare_parallel(spec: RowSpec) -> Iterator[dict]:
    """`spec.workers` bare loops side by side, in as many processes, each on every N-th batch.

    Nothing is sent back but a count per batch; this process yields a placeholder batch of that
    size. It is what N cores reach doing the work with nothing shared: the loops still compete
    for the caches, the memory bus and the scheduler, which `bare loop x cores` ignores. The
    loops wait for each other at the end of every epoch, as any epoch-based loader does.
    """
    import multiprocessing as mp
    from multiprocessing.connection import wait

    workload = WORKLOADS[spec.workload]
    count = max(1, spec.workers)
    ctx = mp.get_context("fork")  # this process imported only numpy and array_record
    barrier = ctx.Barrier(count)
    procs, conns = [], []
    for share in range(count):
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(
            target=_bare_share, args=(spec, share, count, barrier, send), daemon=True
        )
        proc.start()
        send.close()
        procs.append(proc)
        conns.append(receive)
    placeholder = np.zeros((BATCH_SIZE, *workload.out_shape), workload.out_dtype)
    try:
        live = list(conns)
        while live:
            for conn in wait(live):
                try:
                    size = conn.recv()
                except EOFError:
                    raise RuntimeError(
                        "a bare-loop process died; see its traceback above"
                    ) from None
                if size is None:
                    live.remove(conn)
                else:
                    yield {workload.key: placeholder[:size]}
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
            proc.join()


def _bare_share(spec: RowSpec, share: int, count: int, barrier: Any, results: Any) -> None:
    workload = WORKLOADS[spec.workload]
    reader = ShardReader(spec.data.array_record, spec.data.counts)
    batches_per_epoch = -(-spec.data.records // BATCH_SIZE)
    for number, indices in enumerate(batch_indices(spec.data.records, spec.seed, spec.epochs)):
        if number % count == share:
            records = reader.read(indices)
            stack_batch(transform_records(workload, records, indices.tolist(), spec.seed))
            results.send(len(indices))
        if number % batches_per_epoch == batches_per_epoch - 1:
            barrier.wait()
    reader.close()
    results.send(None)
