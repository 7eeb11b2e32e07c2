"""W3, language-model input: real text of skewed lengths, tokenized, packed to 1024, batch 16.

    python benchmarks/compare.py --workload W3 --rounds 3      (the same as)
    python -m benchmarks.lm --rounds 3 --workers 2 --json benchmarks/results/w3.json

The corpus ships with Python: the top-level blocks (separated by two blank lines) of every
standard-library module outside the tests, ~4,000 documents and 11 MB, median ~800 bytes, ~44%
longer than a 1,024-token row. Records are the documents' UTF-8 bytes, in 8 ArrayRecord shards
(and the same bytes as TFRecords). Every row runs `tokenize` below (byte tokens + an end
token) on the same records in a shuffled order; the packing rows fill rows of 1,024 first-fit
over 16 open rows.

Rows, each in its own process (one warm-up epoch, then `--passes` timed epochs, pooled over
`--rounds`): the plain single-process Python first-fit loop (the limit), tpufeed with 0 and N
workers, Grain (`FlatMapIterDataset` cutting long documents, then `FirstFitPackIterDataset`
with 16 bins, then `batch`), and tf.data `padded_batch` to 1,024 without packing (a
reference: documents are cut, and rows hold one document each). Reported: real (non-pad)
tokens/s, packing efficiency (real tokens / room), whether every batch had one shape, time to
the first batch, and the state's size.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.bytecode import compile_sources  # noqa: E402
from benchmarks.datafiles import SHARDS, shard_counts  # noqa: E402
from benchmarks.shards import ShardReader  # noqa: E402

LENGTH, BATCH, OPEN_ROWS, SEED = 1024, 16, 16, 0
EOS, OFFSET = 2, 3  # the byte tokenizer's end token and byte offset (transforms.ByteTokenizer)
ROWS = ["plain-loop", "tpufeed", "tpufeed-workers", "tpufeed-auto", "grain", "tfdata-padded"]
_SKIP = {"test", "tests", "site-packages", "idlelib", "__pycache__", "lib2to3"}


def tokenize(record: bytes) -> dict[str, np.ndarray]:
    """The per-record work of every row: UTF-8 bytes -> int32 tokens, then the end token."""
    tokens = np.empty(len(record) + 1, np.int32)
    tokens[:-1] = np.frombuffer(record, np.uint8)
    tokens[:-1] += OFFSET
    tokens[-1] = EOS
    return {"tokens": tokens}


def documents() -> list[bytes]:
    """The corpus: top-level blocks of the standard library's modules, in a fixed order."""
    root = sysconfig.get_paths()["stdlib"]
    docs = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d not in _SKIP)
        for name in sorted(files):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                    docs += [b.encode() for b in f.read().split("\n\n\n") if b.strip()]
    return docs


def prepare(root: str) -> dict[str, Any]:
    """The corpus as 8 ArrayRecord and 8 TFRecord shards under `root` (written once)."""
    folder = os.path.join(root, "W3")
    done = os.path.join(folder, "done.json")
    if os.path.exists(done):
        with open(done) as f:
            return json.load(f)
    from tpufeed.sources.array_record import write_array_records
    from tpufeed.sources.tfrecord import write_tfrecords

    docs = documents()
    os.makedirs(folder, exist_ok=True)
    counts = shard_counts(len(docs))
    files: dict[str, Any] = {
        "array_record": [],
        "tfrecord": [],
        "counts": counts,
        "tokens": sum(len(d) + 1 for d in docs),
        "cut_tokens": sum(min(len(d) + 1, LENGTH) for d in docs),
        "longest": max(len(d) + 1 for d in docs),
    }
    start = 0
    for shard, count in enumerate(counts):
        part = docs[start : start + count]
        start += count
        base = os.path.join(folder, f"shard-{shard:05d}-of-{SHARDS:05d}")
        write_array_records(base + ".array_record", part, options="group_size:1")
        write_tfrecords(base + ".tfrecord", part)
        files["array_record"].append(base + ".array_record")
        files["tfrecord"].append(base + ".tfrecord")
    with open(done + ".tmp", "w") as f:
        json.dump(files, f)
    os.replace(done + ".tmp", done)
    return files


# -- the rows: each yields batches {"tokens": [16, 1024], "tokens_segment_ids": ...} ---------


def plain_loop(files: dict, epochs: int, workers: int) -> Iterator[dict]:
    """One process, one loop: read in a shuffled order, tokenize, cut into pieces of at most
    1,024; a whole piece is a row of its own, the others go first-fit into 16 open rows
    (closing the fullest when none has room); 16 rows to a batch."""
    reader = ShardReader(files["array_record"], files["counts"])
    n = len(reader)
    rows: list[tuple[list[np.ndarray], int]] = []  # open rows: (pieces, room left)
    done: list[list[np.ndarray]] = []
    for epoch in range(epochs):
        order = np.random.default_rng((SEED, epoch)).permutation(n)
        for start in range(0, n, 256):
            for record in reader.read(order[start : start + 256]):
                tokens = tokenize(record)["tokens"]
                for at in range(0, len(tokens), LENGTH):
                    piece = tokens[at : at + LENGTH]
                    if len(piece) == LENGTH:  # a row of its own
                        done.append([piece])
                        continue
                    for r, (pieces, room) in enumerate(rows):
                        if len(piece) <= room:
                            pieces.append(piece)
                            rows[r] = (pieces, room - len(piece))
                            if room == len(piece):
                                done.append(rows.pop(r)[0])
                            break
                    else:
                        if len(rows) == OPEN_ROWS:
                            fullest = min(range(len(rows)), key=lambda i: rows[i][1])
                            done.append(rows.pop(fullest)[0])
                        rows.append(([piece], LENGTH - len(piece)))
                while len(done) >= BATCH:
                    yield _rows_batch(done[:BATCH])
                    del done[:BATCH]
        done += [pieces for pieces, _ in rows]
        rows = []
        while done:
            yield _rows_batch(done[:BATCH])
            del done[:BATCH]
    reader.close()


def _rows_batch(rows: list[list[np.ndarray]]) -> dict[str, np.ndarray]:
    tokens = np.zeros((BATCH, LENGTH), np.int32)
    segments = np.zeros((BATCH, LENGTH), np.int32)
    positions = np.zeros((BATCH, LENGTH), np.int32)
    ramp = np.arange(LENGTH, dtype=np.int32)
    for r, pieces in enumerate(rows):
        at = 0
        for s, piece in enumerate(pieces, 1):
            tokens[r, at : at + len(piece)] = piece
            segments[r, at : at + len(piece)] = s
            positions[r, at : at + len(piece)] = ramp[: len(piece)]
            at += len(piece)
    return {"tokens": tokens, "tokens_segment_ids": segments, "tokens_positions": positions}


def tpufeed_rows(files: dict, epochs: int, workers: int | str) -> Iterator[dict]:
    import tpufeed

    ds = (
        tpufeed.Dataset.from_array_record(files["array_record"])
        .shuffle(SEED)
        .map(tokenize)
        .pack({"tokens": LENGTH}, open_rows=OPEN_ROWS)
        .batch(BATCH)
        .repeat(epochs)
        .workers(workers)
    )
    it = ds.iterator()
    state_bytes = 0
    try:
        for k, batch in enumerate(it):
            if k % 64 == 0:  # sampled: writing a state is not part of the loop's cost
                state_bytes = max(state_bytes, len(json.dumps(it.get_state())))
            yield batch
    finally:
        it.close()
        _RESULT["state_bytes"] = state_bytes


class _Cut:
    """Grain's flat_map: a document cut into pieces of at most 1,024 tokens."""

    def __init__(self, max_fan_out: int):
        self.max_fan_out = max_fan_out

    def flat_map(self, element: dict) -> list[dict]:
        tokens = element["tokens"]
        return [{"tokens": tokens[at : at + LENGTH]} for at in range(0, len(tokens), LENGTH)]


def grain_rows(files: dict, epochs: int, workers: int) -> Iterator[dict]:
    from absl import flags

    flags.FLAGS(sys.argv[:1])
    import grain
    from grain.experimental import FirstFitPackIterDataset, FlatMapIterDataset, FlatMapTransform

    class Cut(_Cut, FlatMapTransform):
        pass

    source = grain.sources.ArrayRecordDataSource(files["array_record"])
    ds = (
        grain.MapDataset.source(source)
        .shuffle(seed=SEED)
        .repeat(epochs)
        .map(tokenize)
        .to_iter_dataset()
    )
    ds = FlatMapIterDataset(ds, Cut(-(-files["longest"] // LENGTH)))
    ds = FirstFitPackIterDataset(
        ds, length_struct={"tokens": LENGTH}, num_packing_bins=OPEN_ROWS, shuffle_bins=False
    )
    it = iter(ds.batch(BATCH))
    try:
        for batch in it:
            yield {"tokens": batch["tokens"], "tokens_segment_ids": batch["tokens_segment_ids"]}
    finally:
        _RESULT["state_bytes"] = len(json.dumps(it.get_state(), default=str))


def tfdata_rows(files: dict, epochs: int, workers: int) -> Iterator[dict]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    ds = tf.data.TFRecordDataset(files["tfrecord"]).repeat(epochs + 1)  # +1: whole last pass
    ds = ds.shuffle(4096, seed=SEED)

    def work(record: Any) -> Any:
        tokens = tf.numpy_function(lambda r: tokenize(r)["tokens"][:LENGTH], [record], tf.int32)
        return tf.reshape(tokens, [-1])

    ds = ds.map(work, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.padded_batch(BATCH, padded_shapes=[LENGTH], drop_remainder=True).prefetch(2)
    for tokens in ds.as_numpy_iterator():
        yield {"tokens": tokens, "tokens_segment_ids": (tokens > 0).astype(np.int32)}


def _import(row: str) -> None:
    if row.startswith("tpufeed"):
        import tpufeed  # noqa: F401
    elif row == "grain":
        import grain  # noqa: F401
    elif row == "tfdata-padded":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow  # noqa: F401


RUNNERS = {
    "plain-loop": (plain_loop, 0),
    "tpufeed": (tpufeed_rows, 0),
    "tpufeed-workers": (tpufeed_rows, None),
    "tpufeed-auto": (tpufeed_rows, "auto"),
    "grain": (grain_rows, 0),
    "tfdata-padded": (tfdata_rows, 0),
}
_RESULT: dict[str, Any] = {}


def measure(row: str, files: dict, passes: int, workers: int) -> dict[str, Any]:
    """One warm-up epoch, then `passes` timed epochs, told apart by the real tokens seen."""
    fn, fixed_workers = RUNNERS[row]
    per_epoch = files["cut_tokens" if row == "tfdata-padded" else "tokens"]
    _import(row)  # the framework's import is not part of the time to the first batch
    started = time.perf_counter()
    first = None
    real = room = 0
    marks: list[float] = []
    shapes = set()
    batches = fn(files, passes + 1, workers if fixed_workers is None else fixed_workers)
    for batch in batches:
        now = time.perf_counter()
        if first is None:
            first = now - started
        segments = np.asarray(batch["tokens_segment_ids"])
        shapes.add(segments.shape)
        real += int((segments > 0).sum())
        room += segments.size
        while real >= per_epoch * (len(marks) + 1):
            marks.append(now)
        if len(marks) > passes:
            break
    batches.close()  # ends the row's iterator (and writes what it reports on the way out)
    seconds = [b - a for a, b in zip(marks, marks[1:])]
    return {
        "row": row,
        "first_batch_s": first,
        "pass_s": seconds,
        "tokens_per_s": [per_epoch / s for s in seconds],
        "fill": real / room,
        "fixed_shape": shapes == {(BATCH, LENGTH)},
        **_RESULT,
    }


def run_rows(args: argparse.Namespace, files: dict) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {row: [] for row in args.rows}
    for round_number in range(args.rounds):
        for row in args.rows:
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "row.json")
                cmd = [
                    sys.executable,
                    "-m",
                    "benchmarks.lm",
                    "--row",
                    row,
                    "--passes",
                    str(args.passes),
                    "--workers",
                    str(args.workers),
                    "--data-dir",
                    args.data_dir,
                    "--json",
                    out,
                ]
                proc = subprocess.run(
                    cmd,
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    env={**os.environ, "PYTHONPATH": ROOT},
                )
                if proc.returncode:
                    raise SystemExit(
                        f"row {row} failed:\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}"
                    )
                with open(out) as f:
                    result = json.load(f)
            results[row].append(result)
            print(
                f" round {round_number + 1}: {row:<16} "
                f"{statistics.median(result['tokens_per_s']):>14,.0f} real tokens/s",
                flush=True,
            )
    return results


def report(results: dict[str, list[dict]], workers: int) -> tuple[list[dict], list[tuple]]:
    rows = []
    for row, rounds in results.items():
        rates = [r for result in rounds for r in result["tokens_per_s"]]
        rows.append(
            {
                "row": row if row != "tpufeed-workers" else f"tpufeed {workers} workers",
                "tokens_per_s": statistics.median(rates),
                "passes": len(rates),
                "fill": rounds[0]["fill"],
                "fixed_shape": all(r["fixed_shape"] for r in rounds),
                "first_batch_s": statistics.median(r["first_batch_s"] for r in rounds),
                "state_bytes": rounds[0].get("state_bytes"),
            }
        )
    by = {r["row"]: r for r in rows}
    tpufeed0 = by.get("tpufeed")
    best = max(
        (r for r in rows if r["row"].startswith("tpufeed")),
        key=lambda r: r["tokens_per_s"],
        default=None,
    )
    targets = []
    if tpufeed0:
        targets.append(
            ("efficiency >= 0.97 with 16 open rows", tpufeed0["fill"], tpufeed0["fill"] >= 0.97)
        )
        targets.append(
            ("fixed shape on every step", tpufeed0["fixed_shape"], tpufeed0["fixed_shape"])
        )
    if tpufeed0 and "plain-loop" in by:
        ratio = tpufeed0["tokens_per_s"] / by["plain-loop"]["tokens_per_s"]
        targets.append(("tpufeed 0 workers >= 0.8x the plain loop", ratio, ratio >= 0.8))
    fixed = [r for r in rows if r["row"].startswith("tpufeed") and r["row"] != "tpufeed-auto"]
    if "tpufeed-auto" in by and fixed:
        ratio = by["tpufeed-auto"]["tokens_per_s"] / max(r["tokens_per_s"] for r in fixed)
        targets.append(("tpufeed-auto >= 0.9x best fixed tpufeed", ratio, ratio >= 0.9))
    if best and "grain" in by:
        ratio = best["tokens_per_s"] / by["grain"]["tokens_per_s"]
        targets.append(("best tpufeed >= 4x Grain", ratio, ratio >= 4))
    return rows, targets


def main(argv: list[str] | None = None) -> int:
    compile_sources()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of {ROWS}")
    p.add_argument("--passes", type=int, default=3, help="timed epochs per row, after 1 warm-up")
    p.add_argument("--rounds", type=int, default=1, help="run every row this many times in turn")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    p.add_argument("--data-dir", default=os.path.join(ROOT, "benchmarks", "data"))
    p.add_argument("--json", default=None, help="write the figures here")
    p.add_argument("--row", default=None, help=argparse.SUPPRESS)  # run one row in this process
    args = p.parse_args(argv)
    files = prepare(args.data_dir)
    if args.row:
        result = measure(args.row, files, args.passes, args.workers)
        with open(args.json, "w") as f:
            json.dump(result, f)
        return 0
    args.rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = sorted(set(args.rows) - set(ROWS))
    if unknown:
        p.error(f"unknown rows {unknown}; choose from {ROWS}")
    print(
        f"W3: {sum(files['counts']):,} documents, {files['tokens']:,} tokens per epoch; pack to "
        f"{LENGTH}, {OPEN_ROWS} open rows, batch {BATCH}; {args.passes} passes x "
        f"{args.rounds} rounds, N = {args.workers}",
        flush=True,
    )
    rows, targets = report(run_rows(args, files), args.workers)
    print("\n| row | real tokens/s | efficiency | one shape | first batch s | state bytes |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        state = f"{r['state_bytes']:,}" if r["state_bytes"] else "-"
        print(
            f"| {r['row']} | {r['tokens_per_s']:,.0f} | {r['fill']:.3f} | {r['fixed_shape']} | "
            f"{r['first_batch_s']:.3f} | {state} |"
        )
    print("\ntargets (issue 12):")
    for name, value, met in targets:
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        print(f"  {name}: {shown} {'met' if met else 'NOT met'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "command": "python -m benchmarks.lm " + " ".join(argv or sys.argv[1:]),
                    "rows": rows,
                    "targets": [{"target": t, "measured": v, "met": m} for t, v, m in targets],
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
