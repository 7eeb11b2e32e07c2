"""Where the time goes: py-spy samples of the bare loop and of tpufeed with N workers, by stage.

    pip install -e ".[all,dev]" -c constraints/ci.txt   # py-spy, the sampling profiler, is in dev
    python -m benchmarks.profiling --workload W2 --workers 2 [--records 100000] [--json F]

Each row runs one epoch of the workload under `py-spy record --subprocesses --idle
--nonblocking` (the sampled processes are never paused). Every sample of every process is put
in one stage by the frames on its stack: the workload's function (less the rng inside it), the
per-record rng, reading, stacking/writing the batch into its slot, handing batches to the
consumer, waiting (blocked in a pipe, a lock or a sleep), or other Python. The table gives each
stage's CPU-seconds per 1,000 records, summed over the row's processes, and the share of the
row's samples. `bare-parallel` is N bare loops side by side, as in compare.py.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.bytecode import compile_sources  # noqa: E402
from benchmarks.datafiles import prepare  # noqa: E402
from benchmarks.systems import RowSpec  # noqa: E402
from benchmarks.workloads import SEED, WORKLOADS  # noqa: E402

RATE_HZ = 50  # higher rates slow the sampled processes down on 2 cores
# (stage, frame substrings that put a sample in it), checked in this order on the whole stack.
_WAIT = (
    "recv (",
    "recv_bytes",
    "_recv (",
    "wait (",
    "poll (",
    "select (",
    "sleep (",
    "acquire (",
    "get (queue",
    "barrier",
)
STAGES = [
    ("wait", _WAIT),
    ("rng", ("for_record (", "record_rng (")),
    ("transform", ()),  # the workload's fn: filled in per workload
    ("read", ("ShardedSource.__getitems__", "ShardReader.read", "read (tpufeed/chunk.py")),
    (
        "stack / write slot",
        ("write_stacked", "stack_batch", "stack (tpufeed/batching.py", "write_batch"),
    ),
    (
        "hand-off to consumer",
        ("read_batch", "WorkerExecutor", "DatasetIterator", "stream (tpufeed/stream.py", "Batcher"),
    ),
]
ROWS = ["bare-loop", "bare-parallel", "tpufeed"]


def classify(stack: str, fn_name: str) -> str:
    """The stage of one collapsed stack (frames joined by ';', innermost last)."""
    frames = stack.split(";")
    leaf = frames[-1]
    if any(key in leaf for key in _WAIT):
        return "wait"
    for stage, keys in STAGES[1:]:
        keys = keys or (f"{fn_name} (",)
        if any(key in frame for frame in frames for key in keys):
            return stage
    return "other"


def summarise(raw_path: str, fn_name: str, records: int) -> dict[str, Any]:
    """CPU-seconds per 1,000 records and shares by stage, from py-spy's raw output."""
    counts: collections.Counter = collections.Counter()
    processes: set[str] = set()
    with open(raw_path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            process = [part for part in stack.split(";") if part.startswith("process ")][-1:]
            processes.update(process)
            counts[classify(stack, fn_name)] += int(count)
    total = sum(counts.values()) or 1
    per_k = {stage: n / RATE_HZ / records * 1000 for stage, n in counts.items()}
    return {
        "samples": total,
        "processes": len(processes),
        "cpu_s_per_1k_records": per_k,
        "share": {stage: n / total for stage, n in counts.items()},
    }


def run_row(row: str, workload: str, records: int, workers: int, result_path: str) -> None:
    """The profiled program: one epoch of `row`, consumed as fast as it comes."""
    data = prepare(WORKLOADS[workload], records, os.path.join(ROOT, "benchmarks", "data"), SEED)
    spec = RowSpec(
        "tpufeed" if row == "tpufeed" else row,
        workload,
        workers if row != "bare-loop" else 0,
        1,
        SEED,
        data,
    )
    if row == "tpufeed":
        from benchmarks.systems.tpufeed_system import batches
    elif row == "bare-parallel":
        from benchmarks.systems.limits import bare_parallel as batches
    else:
        from benchmarks.systems.limits import bare_loop as batches
    seen = 0
    started = time.perf_counter()
    for batch in batches(spec):
        seen += len(next(iter(batch.values())))
    with open(result_path, "w") as f:
        json.dump({"records": seen, "seconds": time.perf_counter() - started}, f)


def main(argv: list[str] | None = None) -> int:
    compile_sources()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", choices=list(WORKLOADS), default="W2")
    p.add_argument("--records", type=int, default=None)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--rows", default=",".join(ROWS), help=f"subset of {', '.join(ROWS)}")
    p.add_argument("--json", dest="json_path", default=None)
    p.add_argument("--run", default=None, help=argparse.SUPPRESS)  # the profiled child's row
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)  # and where it writes
    args = p.parse_args(argv)
    workload = WORKLOADS[args.workload]
    records = args.records or workload.default_records
    if args.run:
        run_row(args.run, args.workload, records, args.workers, args.result)
        return 0
    if shutil.which("py-spy") is None:
        p.error(
            "py-spy is not installed (or not on PATH); it is in the dev extra: "
            'pip install -e ".[dev]" (or pip install py-spy)'
        )
    prepare(workload, records, os.path.join(ROOT, "benchmarks", "data"), SEED)  # not profiled
    fn_name = workload.fn.__name__
    results = {}
    with tempfile.TemporaryDirectory(prefix="tpufeed-profile-") as tmp:
        for row in [r.strip() for r in args.rows.split(",") if r.strip()]:
            raw, result = os.path.join(tmp, f"{row}.txt"), os.path.join(tmp, f"{row}.json")
            cmd = [
                "py-spy",
                "record",
                "--subprocesses",
                "--idle",
                "--nonblocking",
                "--rate",
                str(RATE_HZ),
                "--format",
                "raw",
                "-o",
                raw,
                "--",
                sys.executable,
                "-m",
                "benchmarks.profiling",
                "--run",
                row,
                "--workload",
                args.workload,
                "--records",
                str(records),
                "--workers",
                str(args.workers),
                "--result",
                result,
            ]
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
            if proc.returncode != 0:
                print(proc.stdout[-2000:] + proc.stderr[-2000:], file=sys.stderr)
                return 1
            with open(result) as f:
                run = json.load(f)
            results[row] = {
                **summarise(raw, fn_name, run["records"]),
                "rate": run["records"] / run["seconds"],
            }
            print(
                f"  {row:<14} {results[row]['rate']:,.0f} records/s, "
                f"{results[row]['samples']:,} samples",
                flush=True,
            )
    stages = [s for s, _ in STAGES if s != "wait"] + ["other", "wait"]
    print(
        f"\n{args.workload}, one epoch of {records:,} records, N = {args.workers}: "
        "CPU-seconds per 1,000 records by stage (share of the row's samples)\n"
    )
    print("| stage | " + " | ".join(results) + " |")
    print("| --- |" + " --- |" * len(results))
    for stage in stages:
        cells = [
            f"{r['cpu_s_per_1k_records'].get(stage, 0):.3f} ({r['share'].get(stage, 0):.0%})"
            for r in results.values()
        ]
        print(f"| {stage} | " + " | ".join(cells) + " |")
    print(
        "| busy, all stages but wait | "
        + " | ".join(
            f"{sum(v for k, v in r['cpu_s_per_1k_records'].items() if k != 'wait'):.3f}"
            for r in results.values()
        )
        + " |"
    )
    print("| records/s | " + " | ".join(f"{r['rate']:,.0f}" for r in results.values()) + " |")
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(
                {
                    "workload": args.workload,
                    "records": records,
                    "workers": args.workers,
                    "rate_hz": RATE_HZ,
                    "rows": results,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
