"""W2 as a `tpufeed bench` target: `tpufeed bench benchmarks/w2_pipeline.py:make_dataset`.

Prepare the data first with `python benchmarks/compare.py --workload W2 --systems raw-reader`.
TPUFEED_W2_WORKERS sets the worker count (default 0), to check what bench suggests.
"""

import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tpufeed
from benchmarks.workloads import augment_w2

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "W2-100000-seed0")


def make_dataset() -> tpufeed.Dataset:
    paths = sorted(glob.glob(os.path.join(DATA, "*.array_record")))
    workers = int(os.environ.get("TPUFEED_W2_WORKERS", "0"))
    return (
        tpufeed.Dataset.from_array_record(paths)
        .shuffle(0)
        .random_map(augment_w2)
        .batch(256)
        .repeat()
        .workers(workers)
    )
