"""The limits: the raw reader alone, and the bare loop (reader + the same work, no framework)."""

from __future__ import annotations

from collections.abc import Iterator

from benchmarks.shards import ShardReader
from benchmarks.systems import RowSpec
from benchmarks.workloads import WORKLOADS, batch_indices, stack_batch, transform_records


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
