"""Sweeps the set-ups of the PyTorch and Grain anchors, to pick each row's strongest one.

    python -m benchmarks.anchor_variants --workload W1 --variants torch --workers 0,2 --rounds 3
    python -m benchmarks.anchor_variants --workload W2 --variants grain-map,grain-loader-row

Each variant is a `TorchOptions` or `GrainOptions` for the rows' own runners
(`benchmarks/systems/torch_system.py`, `grain_system.py`). Every (variant, workers) run goes
through benchmarks/measure.py in a fresh subprocess, like a compare.py row: one warm-up epoch,
then `--passes` timed epochs, exactly epochs x records records checked. Rounds interleave all
variants (the machine's speed drifts), and each variant's figure is the median of its passes
pooled over the rounds, shown next to the rate of the whole run after its first batch (a
deep prefetch filled during the warm-up lifts the first figure, not the second); the 1-minute
load average at each run's start is printed with it, and so is the CPU time per record of
the run's processes (less exposed to a shared machine's other work than records/s).
Variants whose options only concern workers (prefetch depth, start method...) skip 0 workers.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run as a script
    sys.path.insert(0, ROOT)

from benchmarks.bytecode import compile_sources  # noqa: E402
from benchmarks.datafiles import SHARDS, prepare  # noqa: E402
from benchmarks.systems import RowSpec  # noqa: E402
from benchmarks.systems.grain_system import LOADER_OPTIONS, GrainOptions  # noqa: E402
from benchmarks.systems.torch_system import TorchOptions  # noqa: E402
from benchmarks.workloads import SEED, WORKLOADS  # noqa: E402


@dataclass(frozen=True)
class Variant:
    """One set-up: `runner` in `module` called as `runner(spec, options)`."""

    module: str
    runner: str
    options: Any
    parallel_only: bool = False  # its options change nothing without workers


_TORCH, _GRAIN = "benchmarks.systems.torch_system", "benchmarks.systems.grain_system"
_ROW = TorchOptions()

VARIANTS: dict[str, Variant] = {
    "torch-row": Variant(_TORCH, "batches", _ROW),
    "torch-previous": Variant(
        _TORCH, "batches", TorchOptions(reads="batch", prefetch_factor=2, collate="numpy")
    ),
    "torch-getitems": Variant(_TORCH, "batches", TorchOptions(reads="batch")),
    "torch-sampler": Variant(_TORCH, "batches", TorchOptions(sampler="index")),
    "torch-collate-numpy": Variant(_TORCH, "batches", TorchOptions(collate="numpy"), True),
    "torch-collate-default": Variant(_TORCH, "batches", TorchOptions(collate="default")),
    "torch-prefetch2": Variant(_TORCH, "batches", TorchOptions(prefetch_factor=2), True),
    "torch-prefetch8": Variant(_TORCH, "batches", TorchOptions(prefetch_factor=8), True),
    "torch-forkserver": Variant(_TORCH, "batches", TorchOptions(start="forkserver"), True),
    "torch-per-epoch": Variant(_TORCH, "batches", TorchOptions(epochs="per-epoch"), True),
    "torch-per-epoch-persistent": Variant(
        _TORCH, "batches", TorchOptions(epochs="per-epoch", persistent_workers=True), True
    ),
    "grain-map-row": Variant(_GRAIN, "map_dataset", GrainOptions()),
    "grain-map-threads16": Variant(
        _GRAIN, "map_dataset", GrainOptions(read_threads=16, read_buffer=16)
    ),
    "grain-map-threads2": Variant(
        _GRAIN, "map_dataset", GrainOptions(read_threads=2, read_buffer=16)
    ),
    "grain-map-buffer64": Variant(
        _GRAIN, "map_dataset", GrainOptions(read_threads=16, read_buffer=64)
    ),
    "grain-map-worker-buffer4": Variant(_GRAIN, "map_dataset", GrainOptions(worker_buffer=4), True),
    "grain-map-max-parallelism0": Variant(
        _GRAIN, "map_dataset", GrainOptions(reader_options=(("max_parallelism", "0"),))
    ),
    "grain-map-iter-batch": Variant(
        _GRAIN, "map_dataset", GrainOptions(batch_after="iter", read_threads=16, read_buffer=64)
    ),
    "grain-map-iter-batch-buffer500": Variant(
        _GRAIN, "map_dataset", GrainOptions(batch_after="iter", read_threads=16, read_buffer=500)
    ),
    "grain-map-iter-batch-threads0": Variant(
        _GRAIN, "map_dataset", GrainOptions(batch_after="iter", read_threads=0, read_buffer=0)
    ),
    "grain-loader-row": Variant(_GRAIN, "data_loader", LOADER_OPTIONS),
    "grain-loader-worker-buffer4": Variant(
        _GRAIN, "data_loader", GrainOptions(read_threads=0, read_buffer=0, worker_buffer=4), True
    ),
}

_CHILD_VARIANT: str | None = None  # set in a variant's subprocess


def load() -> None:
    """Imports the variant's framework (measure.py times this on its own)."""
    importlib.import_module(VARIANTS[_CHILD_VARIANT].module).load()


def run_variant(spec: RowSpec) -> Any:
    variant = VARIANTS[spec.system]
    return getattr(importlib.import_module(variant.module), variant.runner)(spec, variant.options)


def pick(names: str) -> list[str]:
    """Variant names from a comma list; a bare prefix ("torch", "grain-map") picks them all."""
    chosen: list[str] = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        matches = [v for v in VARIANTS if v == name or v.startswith(name + "-")]
        if not matches:
            raise ValueError(f"no variant named {name!r}; choose from {sorted(VARIANTS)}")
        chosen += [m for m in matches if m not in chosen]
    return chosen


def run_one(spec: RowSpec, timeout: float) -> dict[str, Any]:
    """Runs one (variant, workers) in a fresh subprocess through benchmarks.measure."""
    with tempfile.TemporaryDirectory(prefix="tpufeed-variant-") as tmp:
        spec_path, result_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "result.json")
        with open(spec_path, "w") as f:
            json.dump(spec.to_json(), f)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
        load = os.getloadavg()[0]
        try:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.anchor_variants",
                    "--child",
                    spec_path,
                    result_path,
                ],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            log = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired:
            return {"error": "timed out", "load_at_start": load}
        if not os.path.exists(result_path):
            return {"error": f"exited with {proc.returncode}: {log[-2000:]}", "load_at_start": load}
        with open(result_path) as f:
            result = json.load(f)
    result["load_at_start"] = load
    return result


def sweep(
    workload: str,
    names: list[str],
    workers: list[int],
    rounds: int,
    passes: int,
    records: int,
    data_dir: str,
    timeout: float,
    report: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """All (variant, workers) runs, `rounds` times in turn; one pooled result per pair."""
    data = prepare(WORKLOADS[workload], records, data_dir, SEED)
    pairs = [
        (name, w) for w in workers for name in names if w > 0 or not VARIANTS[name].parallel_only
    ]
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {pair: [] for pair in pairs}
    for number in range(rounds):
        for name, w in pairs:
            result = run_one(RowSpec(name, workload, w, passes + 1, SEED, data), timeout)
            runs[(name, w)].append(result)
            shown = (
                f"{statistics.median(result['rates']):,.0f} records/s"
                if "rates" in result
                else result["error"]
            )
            report(
                f"  round {number + 1} {name:<32} {w}w  {shown}  "
                f"(load {result['load_at_start']:.1f})"
            )
    pooled = []
    for (name, w), results in runs.items():
        errors = [r["error"] for r in results if "error" in r]
        rates = [rate for r in results for rate in r.get("rates", [])]
        pooled.append(
            {
                "variant": name,
                "workers": w,
                "errors": errors,
                "rates": rates,
                "rate": statistics.median(rates) if rates else None,
                "round_rates": [statistics.median(r["rates"]) for r in results if "rates" in r],
                "after_first_batch": statistics.median(
                    r["rate_after_first_batch"] for r in results if "rates" in r
                )
                if rates
                else None,
                "cpu_us_per_record": statistics.median(
                    cpu_per_record(r, records) for r in results if "rates" in r
                )
                if rates
                else None,
                "loads": [r["load_at_start"] for r in results],
            }
        )
    return pooled


def cpu_per_record(result: dict[str, Any], records: int) -> float:
    """CPU µs per record of a whole run (all processes, the import, start-up and warm-up
    included): less exposed than records/s to other work on a shared machine."""
    cpu = result["cpu_main_s"] + result["cpu_workers_s"]
    return 1e6 * cpu / (records * len(result["pass_s"]) + records)


def format_table(workload: str, pooled: list[dict[str, Any]]) -> str:
    lines = [
        f"| {workload} variant | workers | records/s (median, pooled) | after first batch "
        "| CPU µs/record | per round | load |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in pooled:
        rate = f"{p['rate']:,.0f}" if p["rate"] is not None else f"error: {p['errors'][0][:80]}"
        after = f"{p['after_first_batch']:,.0f}" if p["rate"] is not None else ""
        cpu = f"{p['cpu_us_per_record']:.1f}" if p["rate"] is not None else ""
        rounds = ", ".join(f"{r / 1000:.0f}k" for r in p["round_rates"])
        loads = ", ".join(f"{x:.1f}" for x in p["loads"])
        lines.append(
            f"| {p['variant']} | {p['workers']} | {rate} | {after} | {cpu} | {rounds} | {loads} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    compile_sources()
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        global _CHILD_VARIANT
        from benchmarks import measure
        from benchmarks.systems import SYSTEMS, System

        with open(argv[1]) as f:
            name = json.load(f)["system"]
        # measure.py finds a row by name; a variant is a row only in its own subprocess.
        SYSTEMS[name] = System(
            name, "anchor", "benchmarks.anchor_variants", "run_variant", True, name
        )
        module = importlib.import_module("benchmarks.anchor_variants")
        module._CHILD_VARIANT = _CHILD_VARIANT = name
        return measure.main(argv[1:])
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", choices=["W1", "W2"], default="W1")
    p.add_argument(
        "--variants",
        default="torch,grain",
        help=f"comma list of names or prefixes, from: {', '.join(VARIANTS)}",
    )
    p.add_argument("--workers", default="0,2", help="comma list of worker counts")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--records", type=int, default=None)
    p.add_argument("--data-dir", default=os.path.join(ROOT, "benchmarks", "data"))
    p.add_argument("--timeout", type=float, default=900, help="seconds allowed per run")
    p.add_argument("--json", dest="json_path", default=None)
    args = p.parse_args(argv)
    try:
        names = pick(args.variants)
    except ValueError as exc:
        p.error(str(exc))
    workers = [int(w) for w in args.workers.split(",")]
    records = args.records or WORKLOADS[args.workload].default_records
    if records < SHARDS:
        p.error(f"--records must be at least {SHARDS}, got {records}")
    print(
        f"{args.workload}: {records:,} records, {args.passes} timed passes after 1 warm-up, "
        f"{args.rounds} rounds, {os.cpu_count()} cores",
        flush=True,
    )
    pooled = sweep(
        args.workload,
        names,
        workers,
        args.rounds,
        args.passes,
        records,
        args.data_dir,
        args.timeout,
        lambda line: print(line, flush=True),
    )
    print()
    print(format_table(args.workload, pooled))
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(
                {
                    "command": " ".join(["python", "-m", "benchmarks.anchor_variants"] + argv),
                    "workload": args.workload,
                    "variants": pooled,
                },
                f,
                indent=1,
            )
    return 1 if any(p["errors"] for p in pooled) else 0


if __name__ == "__main__":
    sys.exit(main())
