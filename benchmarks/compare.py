"""tpufeed side by side with Grain, tf.data and PyTorch: the same data, the same work, one run.

    python benchmarks/compare.py --workload all --json benchmarks/results/compare.json

Rows: the limits (raw array_record reader; bare loop = that reader + the same per-record fn +
np.stack, in one process; for W2 also the CPU limit = bare loop x cores; bare-parallel = N bare
loops side by side in N processes, which also pay for sharing the caches and memory bus),
tpufeed (also over the same bytes in Parquet: tpufeed-parquet), and the
anchors (Grain MapDataset and DataLoader, tf.data with the fn through tf.numpy_function,
PyTorch DataLoader), each with 0 and N workers, plus tf.data with the work in TF ops as a
reference (not an anchor). Every row runs in a fresh subprocess (benchmarks/measure.py): one
warm-up epoch, then `--passes` timed epochs from the same iterator. With `--rounds R` the whole
list of rows runs R times and each row pools its R runs.

Columns: median records/s of the timed epochs and their spread ((max - min) / median); ratios
to the bare loop and to the best anchor; time to first batch (building the pipeline and
starting workers; the framework import is the next column); peak RSS of the row's main process
and of its largest child process (getrusage; a forked child counts the pages it shares with
its parent); the peak summed PSS of the row's whole process tree, which counts shared pages
once (sampled every 0.2 s; needs psutil); the 1-minute load average when the row started, which
says how noisy the row was on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run as a script: `python benchmarks/compare.py`
    sys.path.insert(0, ROOT)

from benchmarks.bytecode import compile_sources  # noqa: E402
from benchmarks.datafiles import SHARDS, DataFiles, prepare, write_mds  # noqa: E402
from benchmarks.report import check_targets, format_table, format_targets, row_name, summarise  # noqa: E402
from benchmarks.systems import PYTHONS, SYSTEMS, RowSpec  # noqa: E402
from benchmarks.systems.tpufeed_system import has_workers  # noqa: E402
from benchmarks.workloads import SEED, WORKLOADS  # noqa: E402

_SAMPLE_S = 0.2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--workload",
        choices=["W1", "W2", "W3", "W4", "all"],
        default="all",
        help="W3 (language-model input) runs benchmarks/lm.py's rows, "
        "W4 (vision input) benchmarks/vision.py's",
    )
    p.add_argument(
        "--records",
        type=int,
        default=None,
        help="records per workload (default: W1 200,000, W2 100,000)",
    )
    p.add_argument("--passes", type=int, default=3, help="timed epochs per row, after one warm-up")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the whole list of rows this many times, one round after another; "
        "each row's figures pool all its rounds (less exposed to a machine "
        "whose speed drifts while the rows run)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=os.cpu_count() or 1,
        help="N for the N-worker rows (default: os.cpu_count())",
    )
    p.add_argument(
        "--tpufeed-workers",
        default=None,
        help="comma-separated worker counts for the tpufeed row (default: 0 and N), "
        "e.g. 0,1,2 to check that no worker count is slower than none",
    )
    p.add_argument(
        "--systems",
        default=",".join(SYSTEMS),
        help=f"comma-separated subset of: {', '.join(SYSTEMS)}",
    )
    p.add_argument("--json", dest="json_path", default=None, help="write all results here")
    p.add_argument(
        "--data-dir",
        default=os.path.join(ROOT, "benchmarks", "data"),
        help="cache of generated shards (default: benchmarks/data)",
    )
    p.add_argument("--timeout", type=float, default=1800, help="seconds allowed per row")
    p.add_argument(
        "--image-set",
        default="imagenet",
        help="W4's photographs (benchmarks/photos.py: imagenet, progressive, 444, "
        "progressive-444, large, legacy)",
    )
    args = p.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    try:
        args.tpufeed_workers = (
            None
            if args.tpufeed_workers is None
            else sorted({int(c) for c in args.tpufeed_workers.split(",") if c.strip()})
        )
    except ValueError:
        p.error(f"--tpufeed-workers takes comma-separated integers, got {args.tpufeed_workers!r}")
    unknown = [s for s in args.systems if s not in SYSTEMS]
    if unknown:
        p.error(f"unknown system(s) {unknown}; choose from {list(SYSTEMS)}")
    if args.records is not None and args.records < SHARDS:
        p.error(f"--records must be at least {SHARDS} (one per shard), got {args.records}")
    if args.passes < 1:
        p.error(f"--passes must be >= 1, got {args.passes}")
    if args.rounds < 1:
        p.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.workers < 1:
        p.error(f"--workers must be >= 1, got {args.workers}")
    return args


def plan_rows(
    systems: list[str], workers: int, tpufeed_workers: bool, tpufeed_counts: list[int] | None = None
) -> list[tuple[str, int]]:
    """(system, workers) rows in table order: limits, tpufeed, anchors, references.
    `tpufeed_counts`: the tpufeed row's worker counts (default 0 and N)."""
    rows = []
    for name in systems:
        system = SYSTEMS[name]
        if name == "tpufeed" and tpufeed_workers and tpufeed_counts:
            rows += [(name, count) for count in tpufeed_counts]
            continue
        if name != "bare-parallel":  # N loops side by side: it has no 0-worker form
            rows.append((name, 0))
        if system.parallel and (name != "tpufeed" or tpufeed_workers):
            rows.append((name, workers))
    return rows


def row_python(system: str) -> str | None:
    """The python a system's row runs under: this one, or its own environment's (None when that
    is not there)."""
    env = SYSTEMS[system].python_env
    if env is None:
        return sys.executable
    python = os.environ.get(env) or PYTHONS[env]
    return python if os.access(python, os.X_OK) else None


def rows_of_workload(rows: list[tuple[str, int]], workload: str) -> list[tuple[str, int]]:
    """The rows that run on `workload`; a row whose own python is missing is left out, said once."""
    kept = []
    for system, workers in rows:
        allowed = SYSTEMS[system].workloads
        if allowed is not None and workload not in allowed:
            continue
        if row_python(system) is None:
            env = SYSTEMS[system].python_env
            print(
                f"note: {system} ({workers}w) skipped: no python at ${env} or "
                f"{PYTHONS[env or '']} (an environment with that library: "
                "see benchmarks/systems/ for the row)",
                flush=True,
            )
            continue
        kept.append((system, workers))
    return kept


def run_row(spec: RowSpec, timeout: float) -> dict[str, Any]:
    """Runs one row in a fresh process (under its system's python); adds the sampled peak PSS
    of its process tree."""
    with tempfile.TemporaryDirectory(prefix="tpufeed-bench-") as tmp:
        spec_path, result_path, log_path = (
            os.path.join(tmp, name) for name in ("spec.json", "result.json", "log.txt")
        )
        with open(spec_path, "w") as f:
            json.dump(spec.to_json(), f)
        env = dict(os.environ)
        # Workers started by spawn/forkserver import benchmarks.* by name.
        env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        load = os.getloadavg()[0]
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [row_python(spec.system) or sys.executable, "-m", "benchmarks.measure"]
                + [spec_path, result_path],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            peak_pss, timed_out = _watch(proc, timeout)
        if os.path.exists(result_path):
            with open(result_path) as f:
                result = json.load(f)
        else:
            result = {"error": "timed out" if timed_out else f"exited with {proc.returncode}"}
        if "error" in result:
            with open(log_path) as f:
                result["log_tail"] = f.read()[-4000:]
    result.update(
        system=spec.system, workers=spec.workers, load_at_start=load, pss_all_mib=peak_pss
    )
    if "rates" in result:
        rates = result["rates"]
        result["rate"] = statistics.median(rates)
        result["spread"] = (max(rates) - min(rates)) / result["rate"]
    return result


def pool_rounds(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One row's figures over its rounds: the median of all its passes, the median first batch
    and import time, the highest memory; the first error if any round failed."""
    if len(rounds) == 1 or any("error" in r for r in rounds):
        return next((r for r in rounds if "error" in r), rounds[0])
    median = statistics.median
    rates = [rate for r in rounds for rate in r["rates"]]
    pooled = dict(rounds[0])
    pooled.update(
        rates=rates,
        pass_s=[s for r in rounds for s in r["pass_s"]],
        rate=median(rates),
        spread=(max(rates) - min(rates)) / median(rates),
        rate_after_first_batch=median(r["rate_after_first_batch"] for r in rounds),
        rate_early=(
            median(r["rate_early"] for r in rounds)
            if all(r.get("rate_early") for r in rounds)
            else None
        ),
        first_batch_s=median(r["first_batch_s"] for r in rounds),
        import_s=median(r["import_s"] for r in rounds),
        load_at_start=median(r["load_at_start"] for r in rounds),
        rounds=[
            {k: r.get(k) for k in ("rate", "rates", "rate_early", "first_batch_s", "load_at_start")}
            for r in rounds
        ],
    )
    for key in ("rss_main_mib", "rss_worker_mib", "pss_all_mib"):
        values = [r[key] for r in rounds if r.get(key) is not None]
        pooled[key] = max(values) if values else None
    return pooled


def _watch(proc: subprocess.Popen, timeout: float) -> tuple[float | None, bool]:
    """Waits for `proc`, sampling the summed PSS of its process tree; kills it on timeout."""
    try:
        import psutil
    except ImportError:
        psutil = None
    deadline = time.monotonic() + timeout
    peak: float | None = None
    while proc.poll() is None:
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)  # the row's own session: the row and its workers
            proc.wait()
            return peak, True
        if psutil is not None:
            total = _tree_pss(psutil, proc.pid)
            if total is not None:
                peak = total if peak is None else max(peak, total)
        time.sleep(_SAMPLE_S)
    return peak, False


def _tree_pss(psutil: Any, pid: int) -> float | None:
    try:
        root = psutil.Process(pid)
        procs = [root] + root.children(recursive=True)
    except psutil.Error:
        return None
    total = 0
    for p in procs:
        try:
            total += p.memory_full_info().pss
        except psutil.Error:
            pass  # a worker that just exited
    return total / 2**20


def main(argv: list[str] | None = None) -> int:
    compile_sources()
    args = parse_args(argv)
    if args.workload == "W3":
        from benchmarks import lm

        return lm.main(
            [
                "--passes",
                str(args.passes),
                "--rounds",
                str(args.rounds),
                "--workers",
                str(args.workers),
                "--data-dir",
                args.data_dir,
            ]
            + (["--json", args.json_path] if args.json_path else [])
        )
    if args.workload == "W4":
        from benchmarks import vision

        return vision.main(
            [
                "--passes",
                str(args.passes),
                "--rounds",
                str(args.rounds),
                "--workers",
                str(args.workers),
                "--data-dir",
                args.data_dir,
                "--image-set",
                args.image_set,
            ]
            + (["--json", args.json_path] if args.json_path else [])
        )
    cores = os.cpu_count() or 1
    tpufeed_workers = has_workers()
    rows = plan_rows(args.systems, args.workers, tpufeed_workers, args.tpufeed_workers)
    if "tpufeed" in args.systems and not tpufeed_workers:
        print("note: tpufeed has no Dataset.workers yet; only its 0-worker row runs", flush=True)
    report: dict[str, Any] = {
        "command": shlex.join(
            ["python", "benchmarks/compare.py"] + (sys.argv[1:] if argv is None else argv)
        ),
        "machine": {
            "cores": cores,
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_at_start": os.getloadavg(),
        },
        "settings": {
            "passes": args.passes,
            "rounds": args.rounds,
            "workers": args.workers,
            "seed": SEED,
            "batch": 256,
        },
        "workloads": {},
    }
    status = 0
    for name in ["W1", "W2"] if args.workload == "all" else [args.workload]:
        workload = WORKLOADS[name]
        records = args.records or workload.default_records
        data: DataFiles = prepare(
            workload,
            records,
            args.data_dir,
            SEED,
            parquet="tpufeed-parquet" in args.systems,
            tar=bool({"tpufeed-tar", "wds"} & set(args.systems)),
        )
        print(
            f"\n{name}: {workload.summary}; {records:,} records in {len(data.counts)} shards, "
            f"batch 256, {args.passes} timed passes after 1 warm-up, N = {args.workers}"
            + (f", {args.rounds} rounds" if args.rounds > 1 else ""),
            flush=True,
        )
        here = rows_of_workload(rows, name)
        if any(system == "streaming-mds" for system, _ in here):  # MDSWriter's own shards
            data = write_mds(workload, data, SEED, row_python("streaming-mds") or "")
        elif any(system == "tpufeed-mds" for system, _ in here):
            print("note: tpufeed-mds skipped: its shards are written by Streaming's python")
            here = [row for row in here if row[0] != "tpufeed-mds"]
        by_row: dict[tuple[str, int], list[dict[str, Any]]] = {row: [] for row in here}
        for round_number in range(args.rounds):
            if args.rounds > 1:
                print(f" round {round_number + 1} of {args.rounds}", flush=True)
            for system, workers in here:
                spec = RowSpec(system, name, workers, args.passes + 1, SEED, data)
                result = run_row(spec, args.timeout)
                by_row[(system, workers)].append(result)
                shown = f"{result['rate']:,.0f} records/s" if "rate" in result else result["error"]
                print(
                    f"  {row_name(result):<20} {shown:<22} (load {result['load_at_start']:.1f})",
                    flush=True,
                )
                if "error" in result:
                    status = 1
                    print(result.get("traceback") or result.get("log_tail", ""), file=sys.stderr)
        results = [pool_rounds(by_row[row]) for row in here]
        summary = summarise(results, cores)
        print()
        print(format_table(name, results, summary))
        print(
            f"\nbest anchor (same Python fn; TF-ops rows are references, not anchors): "
            f"{summary['best_anchor']}"
        )
        targets = check_targets(name, results, summary)
        print("targets:\n" + format_targets(targets), flush=True)
        report["workloads"][name] = {
            "records": records,
            "summary": summary,
            "rows": results,
            "targets": [{"target": t, "measured": v, "met": m} for t, v, m in targets],
        }
    if args.json_path:
        os.makedirs(os.path.dirname(os.path.abspath(args.json_path)), exist_ok=True)
        with open(args.json_path, "w") as f:
            json.dump(report, f, indent=1)
        print(f"\nwrote {args.json_path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
