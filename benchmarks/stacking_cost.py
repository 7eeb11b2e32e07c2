"""What stacking a batch row by row costs against a list stacked at the end, by element size.

    python -m benchmarks.stacking_cost --rounds 5

`StackedRows` writes each element into its row as it is made, while it is still in the cache
(`tpufeed/ops/rows.py`), or, below `ROWS_FROM_BYTES` a batch, keeps the elements and stacks
them in one call at the end. Here the same pipeline (`from_sequence` of uint8 arrays,
`map` to float32 scaled, `batch`) runs both ways, in this process with no workers, for batches
of several element sizes and row counts: CPU µs an element (best of `--rounds` passes over
`--batches` batches, the two ways interleaved) and rows / listed. Below 1.00 row by row is
cheaper. Timings: run on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# (element bytes as float32, rows a batch)
SHAPES = [
    (1 << 10, 256),  # W1's size (as uint8 there)
    (12 << 10, 256),  # W2's
    (32 << 10, 128),
    (128 << 10, 32),
    (600 << 10, 8),
    (32 << 10, 256),
    (128 << 10, 64),
    (600 << 10, 16),
    (64 << 10, 256),
    (600 << 10, 32),
    (600 << 10, 64),  # W4's (150,528 float32 a 224x224x3 image)
]


def _scale(x: np.ndarray) -> np.ndarray:
    return np.multiply(x, np.float32(1 / 255), dtype=np.float32)


def cpu_per_element(nbytes: int, rows: int, batches: int, rows_from: int) -> float:
    """CPU µs an element of `batches` batches, stacked with `ROWS_FROM_BYTES = rows_from`."""
    import tpufeed
    import tpufeed.ops.rows as rows_module

    source = [np.full(nbytes // 4, i % 251, np.uint8) for i in range(rows * batches)]
    rows_module.ROWS_FROM_BYTES = rows_from
    it = iter(tpufeed.Dataset.from_sequence(source).map(_scale).batch(rows))
    next(it)
    started = time.process_time()
    for _ in range(batches - 1):
        next(it)
    spent = time.process_time() - started
    it.close()
    return spent / (rows * (batches - 1)) * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batches", type=int, default=12)
    args = p.parse_args(argv)
    import tpufeed.ops.rows as rows_module

    default = rows_module.ROWS_FROM_BYTES
    print(f"ROWS_FROM_BYTES = {default:,}; CPU µs an element, best of {args.rounds} rounds")
    print("element KiB | rows | batch MiB | row by row | listed | rows / listed | chosen")
    for nbytes, rows in SHAPES:
        best = {"rows": float("inf"), "listed": float("inf")}
        for _ in range(args.rounds):
            for way, rows_from in (("rows", 0), ("listed", 1 << 62)):
                spent = cpu_per_element(nbytes, rows, args.batches, rows_from)
                best[way] = min(best[way], spent)
        chosen = "rows" if nbytes * rows >= default else "listed"
        print(
            f"{nbytes >> 10:>11} | {rows:>4} | {nbytes * rows / 2**20:>9.2f} | "
            f"{best['rows']:>10.2f} | {best['listed']:>6.2f} | "
            f"{best['rows'] / best['listed']:>13.2f} | {chosen}",
            flush=True,
        )
    rows_module.ROWS_FROM_BYTES = default
    return 0


if __name__ == "__main__":
    sys.exit(main())
