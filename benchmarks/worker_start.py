"""What the first `.workers(n)` of a PyTorch script costs: this checkout against another, in turns.

    git worktree add /tmp/before <commit>
    python -m benchmarks.worker_start --reference /tmp/before --rounds 7

Each run is a fresh interpreter, as a user's script is: it imports torch, builds the pipeline
of docs/coming-from/pytorch.md (a `torch.utils.data.Dataset` through `from_source`, shuffle,
map, batch 8; 480 records, 60 batches) with `.workers(n)`, and times `iter` + the first
`next` ("first batch") and the whole loop, the iterator closed ("whole loop"). `plain` rows
read a list instead of the torch Dataset: their workers need not import torch. Rows run in
turns, the two checkouts' order flipped every round; medians per row and their ratio.
Bytecode is written and read as in an installed package (PYTHONDONTWRITEBYTECODE unset), and
each checkout runs once untimed first.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = r"""
import json, sys, time
import numpy as np
import torch
import tpufeed

source, workers = sys.argv[1], int(sys.argv[2])


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 480

    def __getitem__(self, i):
        return {"x": np.full(3, i, np.float32), "y": np.int64(i * i)}


if source == "torch":
    ds = tpufeed.Dataset.from_source(Squares())
else:
    ds = tpufeed.Dataset.from_sequence([Squares()[i] for i in range(480)])
ds = ds.shuffle(seed=0).map(lambda e: {**e, "x": e["x"] / 48}).batch(8).workers(workers)
started = time.perf_counter()
it = iter(ds)
next(it)
first = time.perf_counter() - started
count = 1 + sum(1 for _ in it)
it.close()
assert count == 60, count
print(json.dumps({"first": first, "loop": time.perf_counter() - started}))
"""

ROWS = [("torch", 0), ("torch", 2), ("plain", 2)]


def run_once(tree: str, source: str, workers: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = tree
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, source, str(workers)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reference", required=True, help="the other checkout (a git worktree)")
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    trees = {"reference": os.path.abspath(args.reference), "this": ROOT}
    for tree in trees.values():
        run_once(tree, "torch", 2)  # writes the bytecode, warms the page cache
    times: dict[tuple[str, str, int, str], list[float]] = {}
    for r in range(args.rounds):
        for source, workers in ROWS:
            order = list(trees.items())
            for side, tree in order if r % 2 else order[::-1]:
                got = run_once(tree, source, workers)
                for what, seconds in got.items():
                    times.setdefault((side, source, workers, what), []).append(seconds)
    print(f"{args.rounds} rounds; medians in seconds")
    print("| row | reference | this | reference / this |")
    print("|---|---|---|---|")
    for source, workers in ROWS:
        for what in ("first", "loop"):
            ref = statistics.median(times[("reference", source, workers, what)])
            new = statistics.median(times[("this", source, workers, what)])
            label = f"{source} source, {workers} workers: {'first batch' if what == 'first' else 'whole loop'}"
            print(f"| {label} | {ref:.3f} | {new:.3f} | {ref / new:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
