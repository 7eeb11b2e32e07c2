"""Runs one row of the comparison in this process and writes its measurements as JSON.

compare.py starts `python -m benchmarks.measure SPEC.json RESULT.json` once per row, so each
row's imports and peak RSS are its own. One iterator covers 1 + passes epochs: the first is the
warm-up and gives the time to first batch (from building the pipeline, worker start-up
included, the framework import not); each later epoch is a timed pass, from the batch that
completed the previous epoch to the batch that completes this one. `rate_early` is the rate over
the first 50,000 records after the first batch: the stretch in which workers start.
"""

from __future__ import annotations

import gc
import importlib
import json
import resource
import sys
import time
import traceback
from typing import Any

from benchmarks.systems import SYSTEMS, RowSpec
from benchmarks.workloads import BATCH_SIZE, WORKLOADS, Workload

EARLY_RECORDS = 50_000  # the window right after the first batch, while workers start


def leaf_info(value: Any) -> tuple[tuple[int, ...], str]:
    """(shape, dtype name) of a numpy array, torch tensor or tf tensor."""
    dtype = value.dtype
    name = getattr(dtype, "name", None)
    if not isinstance(name, str):
        name = str(dtype).removeprefix("torch.")
    return tuple(int(d) for d in value.shape), name


def batch_records(batch: Any) -> int:
    if isinstance(batch, list):  # the raw reader's batches of bytes
        return len(batch)
    return int(next(iter(batch.values())).shape[0])


def check_batch(batch: Any, workload: Workload, system: str) -> None:
    """Raises unless `batch` is what the workload's work produces: same key, shape and dtype."""
    if isinstance(batch, list):
        if not all(isinstance(r, bytes) and len(r) == workload.record_bytes for r in batch):
            raise ValueError(
                f"{system}: raw batch does not hold {workload.record_bytes}-byte records"
            )
        return
    if set(batch) != {workload.key}:
        raise ValueError(f"{system}: batch keys {sorted(batch)}, expected [{workload.key!r}]")
    shape, dtype = leaf_info(batch[workload.key])
    if (
        shape[1:] != workload.out_shape
        or dtype != workload.out_dtype
        or not 0 < shape[0] <= BATCH_SIZE
    ):
        raise ValueError(
            f"{system}: batch is {dtype}{list(shape)}, expected "
            f"{workload.out_dtype}[<={BATCH_SIZE}, {', '.join(map(str, workload.out_shape))}]"
        )


def peak_rss_mib() -> float:
    """This process's peak RSS: VmHWM, the high-water mark of its own memory image.

    `getrusage(RUSAGE_SELF).ru_maxrss` is not used for it: Linux carries the pre-exec image's
    peak into it, and that image was a fork of compare.py, so it starts at compare.py's size.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _usage() -> dict[str, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "rss_main_mib": peak_rss_mib(),
        "rss_main_getrusage_mib": own.ru_maxrss / 1024,
        "rss_worker_mib": children.ru_maxrss / 1024,
        "cpu_main_s": own.ru_utime + own.ru_stime,
        "cpu_workers_s": children.ru_utime + children.ru_stime,
    }


def run(spec: RowSpec) -> dict[str, Any]:
    system = SYSTEMS[spec.system]
    workload = WORKLOADS[spec.workload]
    n = spec.data.records

    start = time.perf_counter()
    module = importlib.import_module(system.module)
    module.load()
    import_s = time.perf_counter() - start
    rss_after_import = peak_rss_mib()

    start = time.perf_counter()
    batches = getattr(module, system.runner)(spec)
    it = iter(batches)
    first = next(it)
    first_at = time.perf_counter()
    first_batch_s = first_at - start
    check_batch(first, workload, spec.system)
    first_records = batch_records(first)

    boundaries = [start]  # the end of each epoch, as seen by the consumer
    seen = first_records
    early = min(EARLY_RECORDS, n * spec.epochs - first_records)  # right after the first batch
    early_at = first_at if early <= 0 else None
    while seen >= len(boundaries) * n:
        boundaries.append(time.perf_counter())
    for batch in it:
        seen += batch_records(batch)
        if early_at is None and seen - first_records >= early:
            early_at = time.perf_counter()
        while seen >= len(boundaries) * n and len(boundaries) <= spec.epochs:
            boundaries.append(time.perf_counter())
    if seen != n * spec.epochs:
        raise ValueError(f"{spec.system}: {seen} records came out of {spec.epochs} epochs of {n}")
    close = getattr(it, "close", None)
    if close is not None:
        close()
    del it, batches, first
    gc.collect()

    pass_s = [b - a for a, b in zip(boundaries[1:], boundaries[2:])]
    # Everything after the first batch, warm-up epoch included: work a deep prefetch did ahead
    # during the warm-up cannot make this rate look better than it is.
    after_first = (n * spec.epochs - first_records) / (boundaries[-1] - first_at)
    return {
        "import_s": import_s,
        "first_batch_s": first_batch_s,
        "warmup_s": boundaries[1] - start,
        "pass_s": pass_s,
        "rates": [n / s for s in pass_s],
        "rate_after_first_batch": after_first,
        "rate_early": early / (early_at - first_at) if early > 0 and early_at > first_at else None,
        "rss_after_import_mib": rss_after_import,
        **_usage(),
    }


def main(argv: list[str]) -> int:
    spec_path, result_path = argv
    with open(spec_path) as f:
        spec = RowSpec.from_json(json.load(f))
    try:
        result: dict[str, Any] = run(spec)
        status = 0
    except BaseException as exc:  # noqa: BLE001 - reported in the table, not fatal to the run
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        status = 1
    with open(result_path, "w") as f:
        json.dump(result, f)
    return status


def descendants_cpu_s() -> float:
    """CPU seconds of this process's descendants, live or exited: the workers and the fork
    server they are forked from. The workers are the fork server's children, so once they
    exit their time is in the server's children counters (/proc's cutime and cstime), not in
    this process's getrusage(RUSAGE_CHILDREN), which holds the children this process reaped."""
    import resource

    import psutil

    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = reaped.ru_utime + reaped.ru_stime
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
