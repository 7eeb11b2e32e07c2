"""The consumer process's CPU per batch and the rate of W1 (compare.py's tpufeed pipeline), in
the checkout given: run it on two trees in turn to see what a change costs the parent.

    python benchmarks/parent_cpu.py /work/ref28 2     # checkout, workers
    python benchmarks/parent_cpu.py . 2

The data is compare.py's (`benchmarks/data/W1-200000-seed0`, made by a first compare.py run).
After 100 batches (workers started, shards open), it times 3 epochs: wall, and the parent's own
user + system CPU (`getrusage`), per batch.
"""

from __future__ import annotations

import glob
import json
import os
import resource
import sys
import time

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "W1-200000-seed0")


def main(tree: str, workers: int) -> dict:
    sys.path.insert(0, os.path.abspath(tree))  # that checkout's tpufeed
    import tpufeed
    from benchmarks.workloads import BATCH_SIZE, WORKLOADS

    files = sorted(glob.glob(os.path.join(DATA, "*.array_record")))
    if not files:
        raise SystemExit(f"no shards in {DATA}: run benchmarks/compare.py --workload W1 once")
    ds = tpufeed.Dataset.from_array_record(files).shuffle(0).map(WORKLOADS["W1"].fn)
    ds = ds.batch(BATCH_SIZE).repeat(3).workers(workers)
    it = iter(ds)
    for _ in range(100):
        next(it)
    before, started, batches = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), 0
    for _ in it:
        batches += 1
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "tree": tree,
        "tpufeed": tpufeed.__file__,
        "batches": batches,
        "records_per_s": batches * BATCH_SIZE / wall,
        "parent_us_per_batch": cpu / batches * 1e6,
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2)))
