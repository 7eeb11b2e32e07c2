"""What `Dataset.mix` costs: W1 read as one dataset, against W1 as a mixture of its two halves.

    python -m benchmarks.mix_cost --rounds 3 --workers 0 --json benchmarks/results/mix-cost.json

Both rows read the same 200,000 1 KiB records (W1's shards: the mixture's components are shards
0-3 and 4-7, weights 0.5 each, restarted when they end), decode them with W1's function and
batch 256; each runs in its own process, one warm-up of 200,000 records, then `--passes`
timed stretches of 200,000 records, pooled over `--rounds` (the rows alternate).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.bytecode import compile_sources  # noqa: E402
from benchmarks.datafiles import prepare  # noqa: E402
from benchmarks.workloads import BATCH_SIZE, SEED, WORKLOADS, decode_w1  # noqa: E402

ROWS = ("W1", "W1 as a mixture of halves")


def dataset(row: str, paths: list[str], workers: int):
    import tpufeed

    def part(files: list[str], seed: int) -> tpufeed.Dataset:
        return tpufeed.Dataset.from_array_record(files).shuffle(seed).map(decode_w1)

    if row == ROWS[0]:
        ds = part(paths, SEED).repeat()
    else:
        ds = tpufeed.Dataset.mix([part(paths[:4], SEED), part(paths[4:], SEED + 1)], seed=SEED)
    return ds.batch(BATCH_SIZE).workers(workers)


def measure(row: str, paths: list[str], records: int, passes: int, workers: int) -> dict:
    it = dataset(row, paths, workers).iterator()
    seen, marks, started = 0, [], time.perf_counter()
    for batch in it:
        seen += len(batch["x"])
        if seen >= records * (len(marks) + 1):
            marks.append(time.perf_counter())
            if len(marks) == passes + 1:
                break
    it.close()
    return {
        "row": row,
        "first_mark_s": marks[0] - started,
        "rates": [records / (b - a) for a, b in zip(marks, marks[1:])],
    }


def main(argv: list[str] | None = None) -> int:
    compile_sources()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--records", type=int, default=WORKLOADS["W1"].default_records)
    p.add_argument("--data-dir", default=os.path.join(ROOT, "benchmarks", "data"))
    p.add_argument("--json", default=None)
    p.add_argument("--row", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    files = prepare(WORKLOADS["W1"], args.records, args.data_dir, SEED)
    paths = list(files.array_record)
    if args.row:
        with open(args.json, "w") as f:
            json.dump(measure(args.row, paths, args.records, args.passes, args.workers), f)
        return 0
    rates: dict[str, list[float]] = {row: [] for row in ROWS}
    for round_number in range(args.rounds):
        for row in ROWS:
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "row.json")
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "benchmarks.mix_cost",
                        "--row",
                        row,
                        "--passes",
                        str(args.passes),
                        "--workers",
                        str(args.workers),
                        "--records",
                        str(args.records),
                        "--data-dir",
                        args.data_dir,
                        "--json",
                        out,
                    ],
                    cwd=ROOT,
                    check=True,
                    env={**os.environ, "PYTHONPATH": ROOT},
                )
                with open(out) as f:
                    rates[row] += json.load(f)["rates"]
            print(
                f" round {round_number + 1}: {row:<28} "
                f"{statistics.median(rates[row][-args.passes :]):>10,.0f} records/s",
                flush=True,
            )
    plain, mixed = (statistics.median(rates[row]) for row in ROWS)
    print(f"\n| row | records/s (median of {len(rates[ROWS[0]])} passes) |\n|---|---|")
    print(f"| {ROWS[0]} | {plain:,.0f} |\n| {ROWS[1]} | {mixed:,.0f} |")
    print(
        f"\nmixture / plain: {mixed / plain:.3f} (target: >= 0.95, at most 5% slower) "
        f"{'met' if mixed / plain >= 0.95 else 'NOT met'}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "command": "python -m benchmarks.mix_cost " + " ".join(argv or sys.argv[1:]),
                    "workers": args.workers,
                    "plain": plain,
                    "mixture": mixed,
                    "ratio": mixed / plain,
                    "rates": rates,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
