"""How much of the first batch's time `it.start()` hides behind a restore.

    python -m benchmarks.restore --workers 0 2 --rounds 5

A resumed job restores its model, then waits for its first batch. With `start()` right after
`ds.iterator(state)`, the batch is made while the model restores. Here the restore is a sleep
as long as the first batch takes (a restore that reads from disk or GCS waits on I/O, and leaves
the CPUs to the pipeline), and the pipeline's records each cost `--cost-ms` of numpy work.

For each worker count, each round times, side by side, from `ds.iterator(state)` to the first
batch in hand: the first batch alone (no restore), the restore then `next()`, and `start()`, the
restore, then `next()`. Reported (medians): the first batch's time, the restore's, both ways of
restoring, and the share of the wait for the first batch after the restore that `start()`
hid: (restore then next - start, restore, next) / (restore then next - restore). (With workers,
that wait is longer than the first batch alone: warm workers get the chunks that this process
makes itself while they start.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run as a script
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

import tpufeed  # noqa: E402
from benchmarks.bytecode import compile_sources  # noqa: E402


def costly(cost_ms: float):
    """A map whose every record costs about `cost_ms` of CPU (matrix products)."""

    def work(e: dict[str, Any]) -> dict[str, Any]:
        m = np.full((64, 64), float(e["id"] % 7 + 1)) / 64
        end = time.perf_counter() + cost_ms / 1000
        while time.perf_counter() < end:
            m = np.tanh(m @ m)
        return {"id": e["id"], "x": m[:8, :8].astype(np.float32)}

    return work


def pipeline(records: int, batch: int, cost_ms: float, workers: int) -> tpufeed.Dataset:
    ds = tpufeed.Dataset.from_sequence([{"id": np.int64(i)} for i in range(records)])
    ds = ds.shuffle(seed=0).map(costly(cost_ms)).batch(batch)
    return ds.workers(workers) if workers else ds


def first_batch_s(ds: tpufeed.Dataset, state: Any, restore_s: float, start: bool | None) -> float:
    """Seconds from `ds.iterator(state)` to its first batch: with no restore (`start` None),
    the restore then `next()`, or `start()`, the restore, then `next()`."""
    began = time.perf_counter()
    it = ds.iterator(state)
    if start:
        it.start()
    if start is not None:
        time.sleep(restore_s)
    next(it)
    took = time.perf_counter() - began
    it.close()
    return took


def measure(args: argparse.Namespace, workers: int) -> dict[str, Any]:
    ds = pipeline(args.records, args.batch, args.cost_ms, workers)
    with ds.iterator() as it:
        for _ in range(args.skip):
            next(it)
        state = it.get_state()
    first_batch_s(ds, state, 0.0, None)  # warm: the fork server, imports
    alone = statistics.median(first_batch_s(ds, state, 0.0, None) for _ in range(args.rounds))
    restore = args.restore_s if args.restore_s is not None else alone
    then, started = [], []
    for _ in range(args.rounds):  # side by side, alternating
        then.append(first_batch_s(ds, state, restore, False))
        started.append(first_batch_s(ds, state, restore, True))
    then_s, started_s = statistics.median(then), statistics.median(started)
    return {
        "workers": workers,
        "first_batch_s": round(alone, 4),
        "restore_s": round(restore, 4),
        "restore_then_next_s": round(then_s, 4),
        "start_restore_next_s": round(started_s, 4),
        "hidden": round((then_s - started_s) / (then_s - restore), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--records", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--cost-ms", type=float, default=4.0, help="CPU per record")
    parser.add_argument("--skip", type=int, default=3, help="batches before the saved state")
    parser.add_argument("--restore-s", type=float, default=None, help="default: the first batch's")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="one JSON document")
    args = parser.parse_args()
    compile_sources()
    rows = [measure(args, workers) for workers in args.workers]
    if args.json:
        print(json.dumps({"schema": "restore/1", "rows": rows}))
        return
    print(f"{'workers':>7} {'batch':>7} {'restore':>8} {'then':>8} {'start':>8} {'hidden':>7}")
    for row in rows:
        print(
            f"{row['workers']:>7} {row['first_batch_s']:>7.3f} {row['restore_s']:>8.3f} "
            f"{row['restore_then_next_s']:>8.3f} {row['start_restore_next_s']:>8.3f} "
            f"{row['hidden']:>7.0%}"
        )


if __name__ == "__main__":
    main()
