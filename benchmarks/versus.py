"""This checkout against another (say, the commit before a refactor), on the same data, in turns.

    git worktree add /tmp/before <commit>
    python -m benchmarks.versus --reference /tmp/before --rounds 3 --workload W1 --systems tpufeed
    python -m benchmarks.versus --reference /tmp/before --rounds 3 --workload W4 --passes 2

`--observe` turns on a timeline and live metrics in this checkout's rows only: against a
worktree of the same commit, it measures what observing costs.

Each round runs `benchmarks/compare.py` once in the reference checkout, then once in this one
(each imports its own tpufeed: the rows run with their checkout as working directory), on the
same shards (`--data-dir`, default this checkout's benchmarks/data). W4 runs this checkout's
`benchmarks/vision.py` rows `tpufeed` and `tpufeed-workers` (`--image-set`) for both, each
with its checkout's tpufeed and transforms (`benchmarks/trees.py`), workers included. Each row pools its passes
over the rounds; the table gives both medians and their ratio, so a drift of the machine hits
both sides alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reference", required=True, help="the other checkout (a git worktree)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workload", choices=["W1", "W2", "W4", "all"], default="all")
    p.add_argument(
        "--image-set", default="imagenet", help="W4's photographs (benchmarks/photos.py)"
    )
    p.add_argument("--systems", default="tpufeed")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--records", type=int, default=None)
    p.add_argument("--data-dir", default=os.path.join(ROOT, "benchmarks", "data"))
    p.add_argument("--json", dest="json_path", default=None)
    p.add_argument(
        "--observe",
        action="store_true",
        help="this checkout's tpufeed rows record a timeline and serve metrics, scraped every "
        "second (TPUFEED_BENCH_OBSERVE=1); with the same commit as --reference: on against off",
    )
    args = p.parse_args(argv)
    if args.observe and args.workload == "W4":
        p.error("--observe is for compare.py's workloads (W1, W2), not W4")
    if not os.path.isfile(os.path.join(args.reference, "benchmarks", "compare.py")):
        p.error(f"{args.reference} has no benchmarks/compare.py: not a tpufeed checkout")
    return args


def run_compare(tree: str, args: argparse.Namespace, out: str, observe: bool = False) -> dict:
    cmd = [
        sys.executable,
        "benchmarks/compare.py",
        "--workload",
        args.workload,
        "--systems",
        args.systems,
        "--passes",
        str(args.passes),
        "--workers",
        str(args.workers),
        "--data-dir",
        args.data_dir,
        "--json",
        out,
    ]
    if args.records is not None:
        cmd += ["--records", str(args.records)]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TPUFEED_BENCH_OBSERVE")}
    if observe:
        env["TPUFEED_BENCH_OBSERVE"] = "1"
    subprocess.run(cmd, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def run_vision(tree: str, args: argparse.Namespace, out: str) -> dict:
    """W4's tpufeed rows, from this checkout's vision.py, with `tree`'s tpufeed; in compare.py's
    report form (images/s as records/s)."""
    from benchmarks.bytecode import compile_sources
    from benchmarks.trees import library

    with tempfile.TemporaryDirectory() as folder:
        library(tree, folder)
        compile_sources(tree)
        compile_sources(folder)
        cmd = [sys.executable, "-m", "benchmarks.vision", "--rows", "tpufeed,tpufeed-workers"]
        cmd += ["--passes", str(args.passes), "--workers", str(args.workers)]
        cmd += ["--data-dir", args.data_dir, "--image-set", args.image_set, "--json", out]
        env = {k: v for k, v in os.environ.items() if k != "TPUFEED_BENCH_OBSERVE"}
        env["PYTHONPATH"] = os.pathsep.join([folder, ROOT])
        env["PYTHONSAFEPATH"] = "1"  # the working directory's tpufeed does not come first
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        report = json.load(f)
    rows = [
        {
            "system": "tpufeed",
            "workers": args.workers if key.endswith("workers") else 0,
            "rates": rates,
        }
        for key, rounds in report["rounds"].items()
        for rates in [[rate for result in rounds for rate in result["images_per_s"]]]
    ]
    return {"workloads": {f"W4-{args.image_set}": {"rows": rows}}}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    trees = {"reference": os.path.abspath(args.reference), "this": ROOT}
    rates: dict[tuple[str, str, int, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for round_number in range(args.rounds):
            for side, tree in trees.items():
                out = os.path.join(tmp, f"{side}-{round_number}.json")
                if args.workload == "W4":
                    report = run_vision(tree, args, out)
                else:
                    report = run_compare(tree, args, out, observe=args.observe and side == "this")
                for workload, data in report["workloads"].items():
                    for row in data["rows"]:
                        key = (workload, row["system"], row["workers"], side)
                        rates.setdefault(key, []).extend(row.get("rates", []))
                print(f"round {round_number + 1}: {side} done", flush=True)
    rows = []
    print("\n| workload | row | reference records/s | this records/s | this / reference |")
    print("|---|---|---|---|---|")
    for workload, system, workers in sorted({k[:3] for k in rates}):
        before = statistics.median(rates[(workload, system, workers, "reference")])
        after = statistics.median(rates[(workload, system, workers, "this")])
        rows.append(
            {
                "workload": workload,
                "system": system,
                "workers": workers,
                "reference": before,
                "this": after,
                "ratio": after / before,
                "passes": len(rates[(workload, system, workers, "this")]),
                "reference_rates": rates[(workload, system, workers, "reference")],
                "this_rates": rates[(workload, system, workers, "this")],
            }
        )
        print(
            f"| {workload} | {system} {workers}w | {before:,.0f} | {after:,.0f} | "
            f"{after / before:.3f} |"
        )
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(
                {
                    "command": " ".join(["python -m benchmarks.versus"] + (argv or sys.argv[1:])),
                    "reference": trees["reference"],
                    "rows": rows,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
