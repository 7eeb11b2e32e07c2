"""Instructions per batch of compare.py's tpufeed pipeline, in two checkouts: a cost of a few
percent that this machine's drift (±5% between two runs of the same code) hides from
`benchmarks/versus.py` shows here exactly.

    python -m benchmarks.instructions --reference /work/ref28 --workload W1 --batches 40
    python -m benchmarks.instructions --reference /work/ref28 --workload W2 --batches 20

For each checkout it runs the pipeline (`from_array_record(...).shuffle().map().batch(256)`,
no workers: the consumer's own path, which is also the parent's with workers) under valgrind's
callgrind twice, with 0 and with N batches after the first, and reports the difference over N:
the instructions of one batch, start-up and imports left out. Needs valgrind (Debian's
`valgrind` package) and compare.py's data (`benchmarks/data`, made by a first compare.py run).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "benchmarks", "data")

PIPELINE = """\
import glob, sys
tree, workload, batches, data = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, tree)
import tpufeed
from benchmarks.workloads import BATCH_SIZE, WORKLOADS
files = sorted(glob.glob(f"{data}/{workload}-*/*.array_record"))
if not files:
    raise SystemExit(f"no {workload} shards under {data}: run benchmarks/compare.py once")
w = WORKLOADS[workload]
ds = tpufeed.Dataset.from_array_record(files).shuffle(0)
it = iter((ds.random_map(w.fn) if w.random else ds.map(w.fn)).batch(BATCH_SIZE))
next(it)  # readers open, first chunk made: what every later batch does not pay
for _ in range(batches):
    next(it)
"""


def instructions(tree: str, workload: str, batches: int, data: str) -> int:
    """Instructions callgrind counts for the whole process with `batches` batches timed."""
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "pipeline.py")
        with open(script, "w") as f:
            f.write(PIPELINE)
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out"]
        cmd += [os.path.realpath(sys.executable), script, tree, workload, str(batches), data]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONHASHSEED"] = "0"  # the same dict and set layouts in every run
        done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"callgrind failed in {tree}:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reference", required=True, help="the other checkout (a git worktree)")
    p.add_argument("--workload", choices=["W1", "W2"], default="W1")
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--data-dir", default=DATA)
    args = p.parse_args(argv)
    per_batch = {}
    for side, tree in (("reference", os.path.abspath(args.reference)), ("this", ROOT)):
        start = instructions(tree, args.workload, 0, args.data_dir)
        whole = instructions(tree, args.workload, args.batches, args.data_dir)
        per_batch[side] = (whole - start) / args.batches
        print(f"{side}: {start:,} at start, {per_batch[side]:,.0f} a batch ({tree})", flush=True)
    ratio = per_batch["reference"] / per_batch["this"]
    print(f"{args.workload}: reference / this instructions a batch = {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
