"""What the parent process costs, and the feed rate it allows on a host of 8 to 240 cores.

    python -m benchmarks.scaling --rounds 3 --json benchmarks/results/scaling.json

Workers run the record work in parallel; the parent (hand-out, hand-off, stream stages such as
`pack`, the batches' bookkeeping) is the one serial part of a host's input. For each workload
(W1 read-bound, W2 Python-transform-bound, W3 language-model: tokenize in the workers, pack in
the parent; W4 vision: JPEG crop, flip and normalise on the imagenet set) and each worker
count, one fresh process runs tpufeed's pipeline for 1 + `--passes` epochs and reads process
CPU counters over a steady window (the epochs after the first, a warm-up): the
parent's CPU seconds (`time.process_time`, all its threads) and the workers' (psutil, summed).
Divided by the input records read in the window:

- `p`: parent CPU per record. `w`: worker CPU per record.

The projection is Amdahl's law in two lines. With C cores, enough workers and a parent that
needs p per record on one thread, every record costs p + w of CPU in all and p of it serially:

    rate(C) = min(C / (p + w), 1 / p)        feed ceiling = 1 / p (any core count)

so the rate stops growing with cores at C = (p + w) / p ("stops scaling at").

`w` comes from the 1-worker run (the parent and one worker on 2 cores: no contention; the
parent also runs chunks there, so w is that run's parent and worker CPU per record less p), and
again from the N-worker run, where the vCPUs slow each other (SMT siblings, shared caches):
the two bracket what a big host gets. The check: w measured with 1 worker, with p, predicts the
2-worker rate, `min(2 / (p + w), 1 / p, 2 / w)`, printed next to the measured rate.

Where the demand side comes from: this module projects the rate a host of C cores can feed
from the measured p and w only. No v4 or v5e per-chip ResNet-50 training rate was found; the
one published ResNet-50 figure found is Google's 2019 Cloud TPU Pods announcement (302 minutes
on a v3-8, 7.1 on a v3 slice of 256), from which W4's "cores for 6,400 images/s per host"
(benchmarks/vision.py, `--host-rate`; the derivation is in benchmarks/RESULTS.md) comes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.bytecode import compile_sources  # noqa: E402
from benchmarks.measure import descendants_cpu_s  # noqa: E402 - after the path fix

CORES = (8, 32, 96, 180, 240)
WORKLOADS = ("W1", "W2", "W3", "W4")


def _pipeline(workload: str, data_dir: str, records: int | None) -> tuple[Any, int]:
    """(the tpufeed dataset without epochs or workers, input records per epoch)."""
    import tpufeed

    if workload == "W3":
        from benchmarks import lm

        files = lm.prepare(data_dir)
        ds = (
            tpufeed.Dataset.from_array_record(files["array_record"])
            .shuffle(lm.SEED)
            .map(lm.tokenize)
            .pack({"tokens": lm.LENGTH}, open_rows=lm.OPEN_ROWS)
            .batch(lm.BATCH)
        )
        return ds, sum(files["counts"])
    if workload == "W4":
        from benchmarks import vision
        from tpufeed.transforms import Normalize, RandomFlip, RandomResizedCrop

        photos = vision.prepare(data_dir, records or 2000, "imagenet")
        ds = (
            tpufeed.Dataset.from_array_record(photos["array_record"])
            .shuffle(vision.SEED)
            .map(tpufeed.codec.decode)
            .random_map(RandomResizedCrop(vision.SIZE, vision.SCALE, vision.RATIO))
            .random_map(RandomFlip())
            .map(Normalize(tuple(vision.MEAN), tuple(vision.STD)))
            .batch(vision.BATCH)
        )
        return ds, photos["images"]
    from benchmarks.datafiles import prepare
    from benchmarks.workloads import BATCH_SIZE, SEED
    from benchmarks.workloads import WORKLOADS as DEFS

    spec = DEFS[workload]
    files = prepare(spec, records or spec.default_records, data_dir, SEED)
    ds = tpufeed.Dataset.from_array_record(list(files.array_record)).shuffle(SEED)
    ds = (ds.random_map(spec.fn) if spec.random else ds.map(spec.fn)).batch(BATCH_SIZE)
    return ds, files.records


def measure_one(
    workload: str, workers: int, passes: int, data_dir: str, records: int | None
) -> dict[str, Any]:
    """One row, in this process: rates and CPU counters over the steady window."""
    ds, n = _pipeline(workload, data_dir, records)
    epochs = 1 + passes
    ds = ds.repeat(epochs)
    if workers:
        ds = ds.workers(workers)
    it = iter(ds)
    warmup = n  # the first epoch: workers started and ahead, the parent no longer making chunks
    try:
        batches = 0
        for _ in it:
            batches += 1
            state = it.get_state()
            if state["epoch"] * n + state["consumed"] >= warmup:
                break
        read_before = state["epoch"] * n + state["consumed"]
        wall0, cpu0, workers0 = time.perf_counter(), time.process_time(), descendants_cpu_s()
        window = 0
        for _ in it:
            window += 1
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    finally:
        it.close()
    wcpu = descendants_cpu_s() - workers0
    read = epochs * n - read_before
    return {
        "workload": workload,
        "workers": workers,
        "records": read,
        "batches": window,
        "seconds": wall,
        "rate": read / wall,
        "parent_cpu_s": cpu,
        "worker_cpu_s": wcpu,
        "p_us": cpu / read * 1e6,
        "w_us": (wcpu if workers else cpu) / read * 1e6,
        "parent_us_per_batch": cpu / window * 1e6,
        "load": os.getloadavg()[0],
    }


def _run_child(workload: str, workers: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.scaling",
        "--one",
        workload,
        str(workers),
        "--passes",
        str(args.passes),
        "--data-dir",
        args.data_dir,
    ]
    if args.records:
        cmd += ["--records", str(args.records)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{workload} with {workers} workers failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def project(p_us: float, w_us: float, cores: int) -> float:
    """Records/s on `cores` cores: min(C / (p + w), 1 / p)."""
    return min(cores / (p_us + w_us), 1.0 / p_us) * 1e6


def summarise(runs: list[dict[str, Any]], n_workers: int) -> dict[str, Any]:
    """Medians per (workload, workers), the 2-worker check and the projection."""
    by: dict[tuple[str, int], list[dict]] = {}
    for run in runs:
        by.setdefault((run["workload"], run["workers"]), []).append(run)
    med = {
        key: {
            k: statistics.median(r[k] for r in rows)
            for k in ("rate", "p_us", "w_us", "parent_us_per_batch", "load")
        }
        for key, rows in by.items()
    }
    out: dict[str, Any] = {"rows": {f"{w} {k}w": v for (w, k), v in med.items()}, "workloads": {}}
    for workload in sorted({w for w, _ in med}):
        one, many = med.get((workload, 1)), med.get((workload, n_workers))
        if one is None or many is None:
            continue
        # With N workers on N cores the parent runs no chunk itself: its CPU is the serial
        # part, p. With 1 worker it also runs chunks on its spare core (stealing), so there the
        # record work w is everything spent per record less that serial part.
        p, wn = many["p_us"], many["w_us"]
        w1 = one["p_us"] + one["w_us"] - p
        predicted = min(n_workers / (p + w1), 1.0 / p, n_workers / w1) * 1e6
        out["workloads"][workload] = {
            "stops_at_cores": (p + w1) / p,  # where C / (p + w) reaches 1 / p
            "p_us": p,
            "w1_us": w1,
            "wn_us": wn,
            "ceiling": 1e6 / p,
            "predicted_nw": predicted,
            "measured_nw": many["rate"],
            "projection": {c: (project(p, w1, c), project(p, wn, c)) for c in CORES},
        }
    return out


def table(summary: dict[str, Any], n_workers: int) -> str:
    lines = [
        "| row | records/s | parent µs/record | worker µs/record | parent µs/batch | load |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, row in sorted(summary["rows"].items()):
        lines.append(
            f"| {name} | {row['rate']:,.0f} | {row['p_us']:.3f} | {row['w_us']:.2f} | "
            f"{row['parent_us_per_batch']:.0f} | {row['load']:.1f} |"
        )
    lines += [
        "",
        f"| workload | p (µs, {n_workers}w) | w (µs, 1w / {n_workers}w) | feed ceiling 1/p | "
        f"stops scaling at | {n_workers}w predicted from 1w | {n_workers}w measured | "
        + " | ".join(f"{c} cores" for c in CORES)
        + " |",
        "| --- " * (7 + len(CORES)) + "|",
    ]
    for workload, s in summary["workloads"].items():
        cells = " | ".join(f"{a / 1e3:,.1f}k–{b / 1e3:,.1f}k" for a, b in s["projection"].values())
        lines.append(
            f"| {workload} | {s['p_us']:.3f} | {s['w1_us']:.2f} / {s['wn_us']:.2f} | "
            f"{s['ceiling'] / 1e6:.3f}M | {s['stops_at_cores']:,.0f} cores | "
            f"{s['predicted_nw']:,.0f} | "
            f"{s['measured_nw']:,.0f} | {cells} |"
        )
    lines.append("")
    lines.append(
        "Projected records/s: min(C / (p + w), 1 / p), with w from the 1-worker run "
        f"and from the {n_workers}-worker run (the range)."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    compile_sources()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--workers", type=int, default=2, help="N for the N-worker rows")
    ap.add_argument("--passes", type=int, default=2, help="timed epochs after the first")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--records", type=int, default=None, help="records of W1/W2 (default theirs)")
    ap.add_argument("--data-dir", default=os.path.join(ROOT, "benchmarks", "data"))
    ap.add_argument("--json", dest="json_path", default=None)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--one", nargs=2, metavar=("WORKLOAD", "WORKERS"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        result = measure_one(
            args.one[0], int(args.one[1]), args.passes, args.data_dir, args.records
        )
        print(json.dumps(result))
        return 0
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in workloads if w not in WORKLOADS]
    if unknown:
        ap.error(f"unknown workload(s) {unknown}; choose from {list(WORKLOADS)}")
    counts = sorted({0, 1, args.workers})
    runs = []
    for round_ in range(args.rounds):
        for workload in workloads:
            for workers in counts:
                run = _run_child(workload, workers, args)
                runs.append({**run, "round": round_})
                print(
                    f"round {round_ + 1}/{args.rounds} {workload} {workers}w: "
                    f"{run['rate']:,.0f} records/s, parent {run['p_us']:.3f} µs/record, "
                    f"workers {run['w_us']:.2f} µs/record (load {run['load']:.1f})",
                    flush=True,
                )
    summary = summarise(runs, args.workers)
    print()
    print(table(summary, args.workers))
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump({"argv": sys.argv, "runs": runs, "summary": summary}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
