"""Build throughput: `tpufeed build` (Beam, in-process, 1 and N worker processes) against the
overhead floor, with each variant's peak memory.

The floor is a single-process Python loop that reads the same JSONL, encodes each record with
tpufeed.codec and writes the same shards with array_record directly, contiguous and balanced.
Every build must produce shards byte-identical to the floor's (checked by CRC32C), so the
difference is what the Beam stage costs: blocks and their counts, the shuffle to shards,
manifest statistics, verification; and what worker processes win back.

    python benchmarks/build.py --records 1000000 --num-shards 8 --workers 1 2 --rounds 3

What the manifest's statistics cost (the length histograms of every field and of the record
sizes, issue 46): `--statistics-off` adds, for one worker (in-process, where this process can
switch them off), a variant built with the histograms counting nothing, in the same rotated
rounds; the schema's inference (types, shapes, presence: needed to decode the records) and the
per-input counts (one small step) stay. The summary prints the build's wall and CPU time with
statistics against without, pooled over the rounds, median against median and round by round:

    python benchmarks/build.py --records 1000000 --workers 1 --statistics-off --rounds 3

Each variant runs in its own process, in rounds whose order rotates (the machine may be
shared); rows give the median seconds, records/s, the ratio to the floor, the speed-up over
one worker, and the peak RSS of the largest process of the variant (a worker process counts
on its own, the runner process on its own). The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run as a script
    sys.path.insert(0, ROOT)

from benchmarks.bytecode import compile_sources  # noqa: E402

FLOOR = "floor"
NO_STATISTICS = "-nostats"  # a variant's suffix: built with the length histograms off


@contextlib.contextmanager
def statistics_off():
    """The build in this process with its length histograms counting nothing (what the
    statistics add to the schema's inference, which stays)."""
    from tpufeed.sources.built.length_histogram import LengthHistogram

    saved = LengthHistogram.add, LengthHistogram.add_many
    LengthHistogram.add = lambda self, length: None  # type: ignore[method-assign]
    LengthHistogram.add_many = lambda self, lengths: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        LengthHistogram.add, LengthHistogram.add_many = saved  # type: ignore[method-assign]


def make_input(path: str, n: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta", "tpu", "feed", "shard", "record"]
    with open(path, "w") as f:
        for i in range(n):
            length = int(rng.integers(16, 128))
            f.write(
                json.dumps(
                    {
                        "id": i,
                        "tokens": rng.integers(0, 32000, length).tolist(),
                        "score": float(rng.random()),
                        "text": " ".join(rng.choice(words, int(rng.integers(4, 20)))),
                    }
                )
                + "\n"
            )


def floor_loop(src: str, out_dir: str, num_shards: int) -> list[str]:
    """The overhead floor: one process, one pass, array_record written directly."""
    from tpufeed import codec
    from tpufeed.beam.read.user_transforms import normalize_record
    from tpufeed.beam.write.ranking import shard_sizes
    from tpufeed.sources.array_record import write_array_records
    from tpufeed.sources.built.manifest import file_crc32c

    with open(src, "rb") as f:
        records = [codec.encode(normalize_record(json.loads(line))) for line in f if line.strip()]
    os.makedirs(out_dir, exist_ok=True)
    crcs, start = [], 0
    for i, size in enumerate(shard_sizes(len(records), num_shards)):
        path = os.path.join(out_dir, f"data-{i:05d}-of-{num_shards:05d}.array_record")
        write_array_records(path, records[start : start + size])
        crcs.append(file_crc32c(path)[1])
        start += size
    return crcs


def stage_costs(src: str, num_shards: int, limit: int = 50000) -> dict[str, float]:
    """CPU microseconds per record of each step of the build, run directly (no runner) on the
    first `limit` records of `src`: what one worker spends, for the at-scale estimates."""
    from tpufeed.beam.read.blocks import count_block, file_starts, plan_blocks, read_block
    from tpufeed.beam.read.inputs import expand_inputs
    from tpufeed.beam.read.user_transforms import normalize_record
    from tpufeed.beam.write import ranking
    from tpufeed.beam.write.schema import RecordSummary
    from tpufeed.beam.write.write_shards import encode_record
    from tpufeed.sources.array_record.shard import write_array_record_shard
    from tpufeed.sources.built.manifest import file_crc32c

    small = src.replace(".jsonl", f"-first-{limit}.jsonl")
    with open(src, "rb") as f, open(small, "wb") as out:
        for _, line in zip(range(limit), f):
            out.write(line)
    blocks = plan_blocks(expand_inputs([small]), 1 << 20)
    costs: dict[str, float] = {}

    def timed(name: str, fn):
        start = time.process_time()
        result = fn()
        costs[name] = (time.process_time() - start) / limit * 1e6
        return result

    counts = timed("count (JSONL lines of a block)", lambda: {b.id: count_block(b) for b in blocks})
    starts = file_starts(blocks, counts)
    raw = timed(
        "read + parse (JSON)", lambda: [r for b in blocks for r in read_block(b, starts[b.id])]
    )
    normal = timed("normalize", lambda: [normalize_record(r) for _, _, r in raw])
    encoded = timed("encode (codec)", lambda: [encode_record(r, "x")[0] for r in normal])

    def summarize() -> None:  # a chunk of records at a time, as ReadBlock does
        summary = RecordSummary()
        for i in range(0, limit, 4096):
            summary.add_many(normal[i : i + 4096], [len(d) for d in encoded[i : i + 4096]])

    with statistics_off():
        timed("summarize: schema only", summarize)
    timed("summarize: schema + statistics", summarize)
    timed(
        "rank + cut into shards",
        lambda: [ranking.shard_of(p, limit, num_shards) for p in range(0, limit, 4096)],
    )
    path = small + ".array_record"
    timed(
        "write (ArrayRecord) + CRC32C",
        lambda: (write_array_record_shard(path, encoded, "group_size:1"), file_crc32c(path)),
    )
    os.remove(path)
    os.remove(small)
    costs["bytes per record (input)"] = os.path.getsize(src) / sum(1 for _ in open(src, "rb"))
    costs["bytes per record (encoded)"] = sum(map(len, encoded)) / limit
    return costs


def run_one(variant: str, src: str, out: str, num_shards: int) -> dict:
    """One variant in this process: seconds and the shards' CRC32Cs."""
    logging.getLogger("apache_beam").setLevel(logging.ERROR)
    start = time.perf_counter()
    if variant == FLOOR:
        crcs = floor_loop(src, out, num_shards)
    else:
        from tpufeed.beam import BuildConfig, build

        workers = variant.removesuffix(NO_STATISTICS)
        off = statistics_off() if variant.endswith(NO_STATISTICS) else contextlib.nullcontext()
        with off:
            build(
                BuildConfig(
                    inputs=(src,),
                    output=out,
                    num_shards=num_shards,
                    workers=workers if workers == "auto" else int(workers),
                    beam_args=("--default_sdk_harness_log_level=ERROR",),
                )
            )
        with open(os.path.join(out, "manifest.json")) as f:
            crcs = [s["crc32c"] for s in json.load(f)["shards"]]
    return {"seconds": time.perf_counter() - start, "crcs": crcs}


def _failure(err: str) -> str:
    """The tpufeed error line of a failed variant's stderr."""
    lines = [
        line for line in err.splitlines() if "TpufeedError" in line or "tpufeed: error" in line
    ]
    return lines[-1][-300:] if lines else err[-300:]


def _measure(variant: str, src: str, out: str, num_shards: int) -> dict:
    """Runs one variant in a child process; adds its peak RSS (largest process, MB)."""
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--one",
        variant,
        "--src",
        src,
        "--out",
        out,
        "--num-shards",
        str(num_shards),
    ]
    with tempfile.TemporaryFile() as result, tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(
            cmd,
            stdout=result,
            stderr=errors,
            env={
                **os.environ,
                "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            },
        )
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        result.seek(0)
        text = result.read().decode()
        errors.seek(0)
        err = errors.read().decode(errors="replace")
    if child.returncode != 0:  # recorded, not raised: a build that fails is a result too
        return {
            "seconds": float("nan"),
            "crcs": None,
            "peak_rss_mb": usage.ru_maxrss / 1024,
            "failed": _failure(err),
        }
    row = json.loads(text.strip().splitlines()[-1])
    row["peak_rss_mb"] = usage.ru_maxrss / 1024
    row["cpu_seconds"] = usage.ru_utime + usage.ru_stime  # the variant's own process
    return row


def run(args: argparse.Namespace, workdir: str) -> list[dict]:
    src = os.path.join(workdir, "input.jsonl")
    if not os.path.exists(src) or sum(1 for _ in open(src, "rb")) != args.records:
        make_input(src, args.records)  # a --workdir keeps the input of an earlier run
    variants = [FLOOR] + [str(w) for w in args.workers]
    if args.statistics_off:
        variants.append("1" + NO_STATISTICS)
    samples: dict[str, list[dict]] = {v: [] for v in variants}
    for r in range(args.rounds):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for variant in order:
            out = os.path.join(workdir, f"out-{variant}-{r}")
            row = _measure(variant, src, out, args.num_shards)
            print(
                f"round {r + 1}: {variant:>5} {row['seconds']:7.1f} s  "
                f"{row.get('cpu_seconds', float('nan')):7.1f} s CPU  "
                f"{row['peak_rss_mb']:7.0f} MB  {row.get('failed') or ''}",
                file=sys.stderr,
                flush=True,
            )
            samples[variant].append(row)
            subprocess.run(["rm", "-rf", out], check=True)
    floor_crcs = samples[FLOOR][0]["crcs"]
    rows = []
    for variant in variants:
        done = [s for s in samples[variant] if not s.get("failed")]
        seconds = statistics.median(s["seconds"] for s in done) if done else float("nan")
        rows.append(
            {
                "variant": _variant_name(variant),
                "key": variant,
                "workers": None
                if variant == FLOOR
                else variant
                if variant == "auto"
                else int(variant.removesuffix(NO_STATISTICS)),
                "seconds": seconds,
                "seconds_all": [s["seconds"] for s in samples[variant]],
                "cpu_seconds_all": [s.get("cpu_seconds") for s in samples[variant]],
                "records": args.records,
                "records_per_s": args.records / seconds,
                "peak_rss_mb": max(s["peak_rss_mb"] for s in samples[variant]),
                "failures": [s["failed"] for s in samples[variant] if s.get("failed")],
                "identical_to_floor": all(s["crcs"] == floor_crcs for s in done) and bool(done),
            }
        )
    floor_s = rows[0]["seconds"]
    one = next((r["seconds"] for r in rows if r["key"] == "1"), None)
    for row in rows:
        row["x_floor_speed"] = floor_s / row["seconds"]
        row["x_one_worker_speed"] = one / row["seconds"] if one and row["workers"] else None
    return rows


def _variant_name(variant: str) -> str:
    if variant == FLOOR:
        return "floor: python loop + array_record"
    if variant == "auto":
        return "tpufeed build, --workers auto"
    workers = variant.removesuffix(NO_STATISTICS)
    name = f"tpufeed build, {workers} worker{'s' if workers != '1' else ''}"
    return name + (", no statistics" if variant.endswith(NO_STATISTICS) else "")


def statistics_cost(rows: list[dict]) -> str | None:
    """The lines saying what the statistics cost one worker's build, in wall time and in the
    CPU time of its process (steadier on a shared machine): pooled over the rounds (the sums),
    median against median, and round by round (the rounds ran side by side)."""
    by_key = {r["key"]: r for r in rows}
    on, off = by_key.get("1"), by_key.get("1" + NO_STATISTICS)
    if on is None or off is None:
        return None
    lines = []
    for what, key in (("wall", "seconds_all"), ("CPU", "cpu_seconds_all")):
        a, b = on[key], off[key]
        if None in a or None in b:
            continue
        paired = [x / y - 1 for x, y in zip(a, b)]
        lines.append(
            f"statistics cost (1 worker, {what} time): {sum(a) / sum(b) - 1:+.1%} of the build "
            f"pooled over the rounds ({sum(a):.1f} s against {sum(b):.1f} s), "
            f"{statistics.median(a) / statistics.median(b) - 1:+.1%} median against median; "
            "round by round " + ", ".join(f"{p:+.1%}" for p in paired)
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    compile_sources()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--num-shards", type=int, default=8)
    parser.add_argument(
        "--workers", nargs="+", default=["1", "2"], help="worker counts to run, and/or auto"
    )
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--statistics-off",
        action="store_true",
        help="also build with one worker and the statistics' histograms off, side by side",
    )
    parser.add_argument("--workdir", default=None, help="default: a temporary folder")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    parser.add_argument(
        "--stage-costs",
        action="store_true",
        help="print the CPU microseconds per record of each build step instead",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--src", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_one(args.one, args.src, args.out, args.num_shards)))
        return 0
    if args.stage_costs:
        with tempfile.TemporaryDirectory(prefix="tpufeed-bench-build-") as workdir:
            src = os.path.join(workdir, "input.jsonl")
            make_input(src, args.records)
            for name, value in stage_costs(src, args.num_shards, min(args.records, 50000)).items():
                print(f"{name:36} {value:10.2f}")
        return 0
    load_before = os.getloadavg()
    if args.workdir:
        os.makedirs(args.workdir, exist_ok=True)
        rows = run(args, args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="tpufeed-bench-build-") as workdir:
            rows = run(args, workdir)
    print(
        f"{args.records:,} JSONL records -> {args.num_shards} ArrayRecord shards; "
        f"{os.cpu_count()} CPUs; median of {args.rounds} round(s); load average "
        f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    print(
        f"{'variant':40} {'seconds':>8} {'records/s':>10} {'x floor':>8} {'x 1 worker':>10} "
        f"{'peak MB':>8}  same shards"
    )
    for r in rows:
        speedup = f"{r['x_one_worker_speed']:10.2f}" if r["x_one_worker_speed"] else f"{'':10}"
        print(
            f"{r['variant']:40} {r['seconds']:8.1f} {r['records_per_s']:10,.0f} "
            f"{r['x_floor_speed']:8.2f} {speedup} {r['peak_rss_mb']:8.0f}  "
            f"{r['identical_to_floor']}"
        )
        for failure in r["failures"]:
            print(f"  failed run: {failure}")
    cost = statistics_cost(rows)
    if cost is not None:
        print(cost)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["identical_to_floor"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
