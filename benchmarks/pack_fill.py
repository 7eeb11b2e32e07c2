"""How full packed rows are: tpufeed's first-fit and best-fit against Grain's, on W3's documents.

    python -m benchmarks.pack_fill --open-rows 4,16,64 --seeds 3 --json fill.json

W3's corpus (benchmarks/lm.py: the standard library's top-level blocks, ~4,000 documents,
tokenized by `lm.tokenize`: byte tokens and an end token) in a shuffled order, the same order
for every row (one order per seed), packed into rows of 1,024 tokens. Every row sees the same
pieces: a document longer than a row is cut into rows' worths (tpufeed splits it so itself;
Grain's packers refuse a sequence longer than the bin, so it gets the pieces as lm.py's Grain
row makes them). Rows:

- tpufeed first_fit / best_fit: `Dataset.pack({"tokens": 1024}, open_rows=N, method=...)`,
  one epoch, no batch (so no empty rows filling an epoch's last batch);
- Grain first-fit / best-fit: `grain.experimental.FirstFitPackIterDataset` /
  `BestFitPackIterDataset` with `num_packing_bins=N` (bins not shuffled: it changes no row).

Reported per row and N: rows made, padding share (1 - real tokens / room in the rows, pooled
over the seeds), rows against tpufeed first_fit's, and the packing's CPU seconds a seed (this
process; a hint only, on a shared machine: packing is the same loop in every epoch).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.lm import LENGTH, SEED, documents, tokenize  # noqa: E402

ROWS = ("tpufeed first_fit", "tpufeed best_fit", "grain first-fit", "grain best-fit")


def corpus(limit: int | None) -> list[np.ndarray]:
    """W3's documents as token arrays, in the corpus's fixed order (the first `limit`)."""
    return [tokenize(d)["tokens"] for d in documents()[:limit]]


def tpufeed_rows(docs: list[np.ndarray], open_rows: int, method: str) -> Iterable[np.ndarray]:
    import tpufeed

    ds = tpufeed.Dataset.from_sequence([{"tokens": d} for d in docs])
    packed = ds.pack({"tokens": LENGTH}, open_rows=open_rows, method=method)
    return (row["tokens_segment_ids"] for row in packed)


def grain_rows(docs: list[np.ndarray], bins: int, method: str) -> Iterable[np.ndarray]:
    import grain

    pieces = [{"tokens": d[at : at + LENGTH]} for d in docs for at in range(0, len(d), LENGTH)]
    kind = {
        "first-fit": grain.experimental.FirstFitPackIterDataset,
        "best-fit": grain.experimental.BestFitPackIterDataset,
    }[method]
    ds = grain.MapDataset.source(pieces).to_iter_dataset()
    packed = kind(ds, length_struct={"tokens": LENGTH}, num_packing_bins=bins, shuffle_bins=False)
    return (row["tokens_segment_ids"] for row in packed)


def packer(row: str) -> Callable[[list[np.ndarray], int], Iterable[np.ndarray]]:
    system, method = row.split(" ")
    make = tpufeed_rows if system == "tpufeed" else grain_rows
    return lambda docs, n: make(docs, n, method)


def measure(row: str, docs: list[np.ndarray], n: int) -> dict[str, Any]:
    """Rows, real tokens and CPU seconds of one row packing `docs` with `n` open rows."""
    start = time.process_time()
    rows = tokens = 0
    for segment_ids in packer(row)(docs, n):
        rows += 1
        tokens += int(np.count_nonzero(segment_ids))
    return {"rows": rows, "tokens": tokens, "cpu_s": time.process_time() - start}


def run(docs: list[np.ndarray], open_rows: list[int], seeds: int) -> list[dict[str, Any]]:
    import grain  # noqa: F401  (imported here: no row's CPU time holds an import)

    import tpufeed  # noqa: F401

    results = []
    orders = [np.random.default_rng(SEED + s).permutation(len(docs)) for s in range(seeds)]
    for n in open_rows:
        for row in ROWS:
            runs = [measure(row, [docs[i] for i in order], n) for order in orders]
            rows, tokens = sum(r["rows"] for r in runs), sum(r["tokens"] for r in runs)
            results.append(
                {
                    "row": row,
                    "open_rows": n,
                    "rows": rows // seeds,
                    "tokens": tokens // seeds,
                    "padding": 1 - tokens / (rows * LENGTH) if rows else 0.0,
                    "cpu_s": sum(r["cpu_s"] for r in runs) / seeds,
                }
            )
    return results


def report(results: list[dict[str, Any]]) -> list[str]:
    lines = ["| open rows / bins | row | rows | padding share | rows / first_fit's | CPU s |"]
    lines.append("|---|---|---|---|---|---|")
    for r in results:
        base = next(
            b["rows"] for b in results if b["row"] == ROWS[0] and b["open_rows"] == r["open_rows"]
        )
        lines.append(
            f"| {r['open_rows']} | {r['row']} | {r['rows']:,} | {r['padding']:.2%} | "
            f"{r['rows'] / base:.4f} | {r['cpu_s']:.2f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--open-rows", default="4,16,64", help="open rows / bins, comma-separated")
    parser.add_argument("--seeds", type=int, default=3, help="shuffled orders, pooled")
    parser.add_argument("--documents", type=int, default=None, help="the first N (all: none)")
    parser.add_argument("--json", default=None, help="write the results here too")
    args = parser.parse_args(argv)
    open_rows = [int(n) for n in args.open_rows.split(",")]
    docs = corpus(args.documents)
    tokens = sum(len(d) for d in docs)
    results = run(docs, open_rows, args.seeds)
    print(
        f"W3's documents: {len(docs):,}, {tokens:,} tokens, rows of {LENGTH}; "
        f"{args.seeds} shuffled orders pooled; no batch after pack"
    )
    print("\n".join(report(results)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"documents": len(docs), "tokens": tokens, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
