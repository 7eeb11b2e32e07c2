"""When each batch arrives in the first seconds of an epoch: where workers cost the early window.

    python -m benchmarks.timeline --workload W1 --workers 0 1 2 --seconds 2

For each worker count, in its own process: the time of the first batch, then records per 0.1 s
bin after it, the longest gap between two batches, and the records/s over the first 50k records
after the first batch (compare.py's "first 50k" column). `--ahead S` waits S seconds between
building the dataset and iterating it, as a training script does while it builds its model. The pipeline is compare.py's tpufeed
row (`from_array_record(...).shuffle().map().batch(256)`, prefetch 0).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from benchmarks.bytecode import compile_sources
from benchmarks.datafiles import prepare
from benchmarks.workloads import BATCH_SIZE, WORKLOADS

_ROOT = os.path.join(os.path.dirname(__file__), "data")
_BIN_S = 0.1


def measure(
    workload: str, records: int, workers: int, seconds: float, early: int, ahead: float = 0.0
) -> dict:
    """One worker count, in this process; `ahead`: seconds between building the dataset and
    iterating it (a training script builds and compiles its model there)."""
    import tpufeed

    spec = WORKLOADS[workload]
    files = prepare(spec, records, _ROOT, seed=0)
    ds = tpufeed.Dataset.from_array_record(list(files.array_record)).shuffle(0)
    ds = (ds.random_map(spec.fn) if spec.random else ds.map(spec.fn)).batch(BATCH_SIZE)
    ds = ds.prefetch(0)
    if workers:
        ds = ds.workers(workers)
    time.sleep(ahead)
    started = time.perf_counter()
    times: list[float] = []
    it = iter(ds)
    try:
        for _ in it:
            times.append(time.perf_counter() - started)
            if times[-1] - times[0] > seconds and len(times) * BATCH_SIZE > early + BATCH_SIZE:
                break
    finally:
        it.close()
    first = times[0]
    bins = [0] * int(seconds / _BIN_S + 1)
    for t in times[1:]:
        k = int((t - first) / _BIN_S)
        if k < len(bins):
            bins[k] += BATCH_SIZE
    after = [t - first for t in times[1:]]
    n_early = early // BATCH_SIZE
    early_rate = n_early * BATCH_SIZE / after[n_early - 1] if len(after) >= n_early else None
    gap = max(b - a for a, b in zip(times, times[1:]))
    return {
        "workers": workers,
        "first_batch_s": round(first, 3),
        "longest_gap_s": round(gap, 3),
        "early_records_per_s": round(early_rate) if early_rate else None,
        "records_per_bin": bins,
        "bin_s": _BIN_S,
    }


def main(argv: list[str] | None = None) -> int:
    compile_sources()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="W1", choices=sorted(WORKLOADS))
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--early", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--ahead",
        type=float,
        default=0.0,
        help="seconds between building the dataset and iterating it",
    )
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # child process
    args = parser.parse_args(argv)
    records = args.records or WORKLOADS[args.workload].default_records
    if args.one:
        print(
            json.dumps(
                measure(
                    args.workload, records, args.workers[0], args.seconds, args.early, args.ahead
                )
            )
        )
        return 0
    prepare(WORKLOADS[args.workload], records, _ROOT, seed=0)
    for round_ in range(args.rounds):
        for workers in args.workers:
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.timeline",
                    "--one",
                    "--workload",
                    args.workload,
                    "--records",
                    str(records),
                    "--workers",
                    str(workers),
                    "--seconds",
                    str(args.seconds),
                    "--early",
                    str(args.early),
                    "--ahead",
                    str(args.ahead),
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            row = json.loads(out.stdout.strip().splitlines()[-1])
            bins = " ".join(f"{b // 1000:>3}" for b in row["records_per_bin"])
            print(
                f"round {round_} {workers}w: first batch {row['first_batch_s']:.2f} s, "
                f"longest gap {row['longest_gap_s']:.2f} s, first {args.early // 1000}k "
                f"{row['early_records_per_s']:,} rec/s; k records per {_BIN_S} s: {bins}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
