"""`Dataset.from_parquet` against a Hugging Face `datasets.Dataset` of the same rows.

    python -m benchmarks.parquet_hf --rounds 3 --json benchmarks/results/parquet-hf.json

The rows (default 200,000): `id` int64, `label` int64, `text` (about 60 characters) and
`tokens` (0-127 int32s), in 4 Parquet files of `--row-group` rows per row group. The Hugging
Face dataset is `datasets.Dataset.from_parquet` of those files (Arrow files on disk, memory-
mapped, as `load_dataset` gives), and the same saved with `save_to_disk` and read back with
`datasets.load_from_disk` (the `from_huggingface(load_from_disk)` row). Every row shuffles globally (seed 0), batches 256 with the
tokens padded to 128, and runs `--workers` workers; each row runs in its own process: one
warm-up stretch of `--records`, then `--passes` timed stretches, pooled over `--rounds` (the
rows alternate). Reported: the median records/s of all passes.
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
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run as a script
    sys.path.insert(0, ROOT)

from benchmarks.bytecode import compile_sources  # noqa: E402

FILES, BATCH, PAD, SEED = 4, 256, 128, 0


def _hf(data_dir: str) -> Any:
    import datasets

    datasets.disable_progress_bars()
    return datasets.Dataset.from_parquet(
        sorted(_paths(data_dir)), cache_dir=os.path.join(data_dir, "hf-cache")
    )


def _saved(data_dir: str) -> Any:
    """The Hugging Face dataset written with `save_to_disk` once, read with `load_from_disk`."""
    import datasets

    saved = os.path.join(data_dir, "hf-saved")
    if not os.path.exists(os.path.join(saved, "dataset_info.json")):
        _hf(data_dir).save_to_disk(saved)
    return datasets.load_from_disk(saved)


def _paths(data_dir: str) -> list[str]:
    return [os.path.join(data_dir, f"part-{f}.parquet") for f in range(FILES)]


def _lists_to_arrays(e: dict) -> dict:
    import numpy as np

    return {"id": e["id"], "label": e["label"], "tokens": np.asarray(e["tokens"], np.int32)}


ROWS = (
    "from_parquet",
    "from_huggingface",
    "from_huggingface(load_from_disk)",
    "from_source(hf)",
    "from_source(hf numpy)",
)


def source(row: str, data_dir: str) -> Any:
    """The unshuffled Dataset of `row`: Parquet files, or the Hugging Face dataset of them."""
    import tpufeed

    if row == "from_parquet":
        return tpufeed.Dataset.from_parquet(_paths(data_dir))
    if row == "from_huggingface":
        return tpufeed.Dataset.from_huggingface(_hf(data_dir))
    if row == "from_huggingface(load_from_disk)":
        return tpufeed.Dataset.from_huggingface(_saved(data_dir))
    if row == "from_source(hf)":
        return tpufeed.Dataset.from_source(_hf(data_dir))
    return tpufeed.Dataset.from_source(_hf(data_dir).with_format("numpy"))


def write_data(data_dir: str, rows: int, row_group: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    stamp = os.path.join(data_dir, f"rows-{rows}-group-{row_group}.done")
    if os.path.exists(stamp):
        return
    os.makedirs(data_dir, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for f, part in enumerate(np.array_split(np.arange(rows), FILES)):
        lengths = rng.integers(0, PAD, part.size)
        table = pa.table(
            {
                "id": pa.array(part, pa.int64()),
                "label": pa.array(rng.integers(0, 10, part.size), pa.int64()),
                "text": pa.array([f"document {i}: " + "lorem ipsum " * 4 for i in part.tolist()]),
                "tokens": pa.array(
                    [rng.integers(0, 30000, n, dtype=np.int32) for n in lengths],
                    pa.list_(pa.int32()),
                ),
            }
        )
        pq.write_table(table, _paths(data_dir)[f], row_group_size=row_group)
    with open(stamp, "w") as out:
        out.write("ok\n")


def measure(row: str, data_dir: str, records: int, passes: int, workers: int) -> dict:
    ds = (
        source(row, data_dir)
        .shuffle(SEED)
        .map(_lists_to_arrays)
        .batch(BATCH, pad={"tokens": PAD})
        .repeat()
        .workers(workers)
    )
    started = time.perf_counter()
    it = ds.iterator()
    first, seen, marks = None, 0, []
    for batch in it:
        first = first or time.perf_counter() - started
        seen += len(batch["id"])
        if seen >= records * (len(marks) + 1):
            marks.append(time.perf_counter())
            if len(marks) == passes + 1:
                break
    it.close()
    return {
        "row": row,
        "first_batch_s": first,
        "rates": [records / (b - a) for a, b in zip(marks, marks[1:])],
    }


def main(argv: list[str] | None = None) -> int:
    compile_sources()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--passes", type=int, default=2)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--rows", type=int, default=200_000, help="rows in the dataset")
    p.add_argument("--records", type=int, default=50_000, help="records per timed pass")
    p.add_argument("--row-group", type=int, default=1000, help="rows per Parquet row group")
    p.add_argument("--data-dir", default=os.path.join(ROOT, "benchmarks", "data", "parquet-hf"))
    p.add_argument("--json", default=None)
    p.add_argument("--row", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    data_dir = os.path.join(args.data_dir, f"rows-{args.rows}-group-{args.row_group}")
    if args.row:
        with open(args.json, "w") as f:
            json.dump(measure(args.row, data_dir, args.records, args.passes, args.workers), f)
        return 0
    command = "python -m benchmarks.parquet_hf " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    print(command, flush=True)
    write_data(data_dir, args.rows, args.row_group)
    rates: dict[str, list[float]] = {row: [] for row in ROWS}
    firsts: dict[str, list[float]] = {row: [] for row in ROWS}
    for round_number in range(args.rounds):
        for row in ROWS:
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "row.json")
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "benchmarks.parquet_hf",
                        "--row",
                        row,
                        "--passes",
                        str(args.passes),
                        "--workers",
                        str(args.workers),
                        "--rows",
                        str(args.rows),
                        "--records",
                        str(args.records),
                        "--row-group",
                        str(args.row_group),
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
                    got = json.load(f)
            rates[row] += got["rates"]
            firsts[row].append(got["first_batch_s"])
            print(
                f" round {round_number + 1}: {row:<24} "
                f"{statistics.median(got['rates']):>10,.0f} records/s",
                flush=True,
            )
    medians = {row: statistics.median(r) for row, r in rates.items()}
    print(
        f"\n| row | records/s (median of {args.rounds * args.passes} passes) | first batch s |"
        "\n|---|---|---|"
    )
    for row in ROWS:
        print(f"| {row} | {medians[row]:,.0f} | {statistics.median(firsts[row]):.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "command": command,
                    "rows": args.rows,
                    "row_group": args.row_group,
                    "workers": args.workers,
                    "medians": medians,
                    "rates": rates,
                    "first_batch_s": firsts,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
