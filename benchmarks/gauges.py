"""The pipelines whose instructions a batch `benchmarks/instructions.py` counts, one a process.

    valgrind --tool=callgrind --dump-before=getloadavg python benchmarks/gauges.py \
        TREE LIBRARY GAUGE DATA

Run under callgrind by `instructions.py`, never on its own: it imports tpufeed from the
checkout `TREE` through `LIBRARY` (`benchmarks/trees.py`: that checkout's tpufeed and
transforms, for this process and its workers; any commit: the gauge's functions come from this
file's checkout, so two trees run the very same per-record work), builds gauge `GAUGE`'s
pipeline over the shards `DATA` (a JSON file `instructions.py` writes), takes its warm-up batches, then calls `os.getloadavg()`
(glibc's `getloadavg`, which nothing in tpufeed calls) before and after the measured batches.
callgrind dumps its counts at each call, so the second part holds those batches alone: no
interpreter start, no imports, no first batch. With workers, the process counted is the parent
(the fork server and its workers are started by exec, which callgrind does not follow).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Gauge:
    """A pipeline counted: `workload`'s data and work, `workers`, the batches taken before the
    count (`warm`: readers open, workers started and ahead, caches filled) and counted."""

    workload: str  # W1, W2 (compare.py's), W3 (lm.py's packing), W4 (vision.py's crop)
    workers: int
    warm: int
    batches: int
    summary: str
    # With workers, a pause before each batch: every answer the workers can make is waiting
    # when the parent asks, so its work does not depend on how the workers' timing falls.
    pause_s: float = 0.0


GAUGES = {
    "W1-0w": Gauge("W1", 0, 8, 64, "1 KiB records -> uint8[1024], batch 256, no workers"),
    "W1-2w": Gauge("W1", 2, 16, 64, "the same with 2 workers: the parent's share", 0.05),
    "W2-0w": Gauge("W2", 0, 3, 8, "32x32x3 augment -> float32[30,30,3], batch 256, no workers"),
    "W2-2w": Gauge("W2", 2, 8, 32, "the same with 2 workers: the parent's share", 0.15),
    # A chunk of 256 documents packs into ~43 batches: 172 batches hold 4 chunks' work.
    "W3-0w": Gauge("W3", 0, 8, 172, "stdlib text, byte tokens packed to 1024, batch 16"),
    "W4-0w": Gauge("W4", 0, 1, 2, "JPEG crop 224, flip, normalise, batch 64 (imagenet set)"),
    # Its workers start slowly (OpenCV, TurboJPEG): the parent makes the first chunks itself
    # meanwhile (`WorkerExecutor`'s stealing), and those must be handed out before the count.
    "W4-2w": Gauge("W4", 2, 8, 8, "the same with 2 workers: the parent's share", 0.8),
}


def main(argv: list[str]) -> int:
    tree, library, name, data_path = argv
    gauge = GAUGES[name]
    with open(data_path) as f:
        data = json.load(f)
    batches = _batches(tree, library, gauge, data)
    for _ in range(gauge.warm):
        time.sleep(gauge.pause_s)
        next(batches)
    os.getloadavg()  # callgrind dumps here: the counted part begins
    for _ in range(gauge.batches):
        time.sleep(gauge.pause_s)
        next(batches)
    os.getloadavg()  # and ends here
    batches.close()
    return 0


def _batches(tree: str, library: str, gauge: Gauge, data: dict) -> Iterator[Any]:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p) != os.path.join(ROOT, "benchmarks")]
    sys.path.insert(0, ROOT)  # this checkout's benchmarks: the same work for every tree
    import cloudpickle

    import benchmarks
    from benchmarks import lm, vision, workloads

    # Workers unpickle the functions by value, never importing another checkout's benchmarks.
    cloudpickle.register_pickle_by_value(benchmarks)
    sys.path.insert(0, library)  # workers start with this process's sys.path
    import tpufeed

    found = os.path.dirname(os.path.dirname(os.path.realpath(tpufeed.__file__)))
    if found != os.path.realpath(tree):
        raise SystemExit(f"tpufeed was imported from {found}, not from {tree}")
    ds = tpufeed.Dataset.from_array_record(data[gauge.workload]).shuffle(0)
    if gauge.workload in ("W1", "W2"):
        work = workloads.WORKLOADS[gauge.workload]
        ds = (ds.random_map(work.fn) if work.random else ds.map(work.fn)).batch(256)
    elif gauge.workload == "W3":
        ds = ds.map(lm.tokenize).pack({"tokens": lm.LENGTH}, open_rows=lm.OPEN_ROWS)
        ds = ds.batch(lm.BATCH)
    else:
        from tpufeed.transforms import Normalize, RandomFlip, RandomResizedCrop

        ds = (
            ds.map(tpufeed.codec.decode)
            .random_map(RandomResizedCrop(vision.SIZE, vision.SCALE, vision.RATIO))
            .random_map(RandomFlip())
            .map(Normalize(tuple(vision.MEAN), tuple(vision.STD)))
            .batch(vision.BATCH)
        )
    if gauge.workers:
        ds = ds.workers(gauge.workers)
    it = iter(ds.repeat())
    try:
        yield from it
    finally:
        it.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
