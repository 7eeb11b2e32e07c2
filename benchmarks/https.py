"""https:// beside gs://: W1's shards read cold and warm from a web server and from the GCS
emulator, side by side in one run, against the same shards on local disk.

    python -m benchmarks.https [--records 50000] [--rounds 5] [--json F]

W1's 8 ArrayRecord shards (benchmarks/data) are served twice on 127.0.0.1, each by its own
process: by the tests' web server (tests/http_server.py: ranges and ETags, a threaded
http.server) as http:// URLs named one by one, and by `gcp-storage-emulator` (in memory) as
gs://BUCKET/w1/*.array_record. Both are Python servers on this machine's CPUs, so the figures
compare tpufeed's two store clients over the same kind of server, not the networks. Each round
runs every row once, in an order rotated from round to round; the rows are pooled over the
rounds (median and best). Every row is the same pipeline (global shuffle, W1's map, batch 256,
no worker processes):

  local files      the shards on local disk (what the stores' rows are held against)
  gs:// cold       an epoch from an empty shard cache: downloads, CRC32C checks, reads
  gs:// warm       an epoch from the full cache, with a new Dataset (a restarted job)
  https:// cold    the same over the web server (each file pinned by its ETag, the copy's
                   CRC32C sealed on its first download)
  https:// warm    the same, from its full cache

"open s" is building the Dataset (listing or one ranged GET a file, footers read by ranges); the
epoch is timed from the first `next`, as in benchmarks/gcs.py. "cpu s" is this process's CPU
time for the row (the open and the epoch, its read-ahead threads included; not the servers'):
what each store costs the host, steadier than wall time on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.bytecode import compile_sources  # noqa: E402
from benchmarks.datafiles import prepare  # noqa: E402
from benchmarks.gcs import _epoch, _pipeline  # noqa: E402 - one timing of an epoch for both
from benchmarks.workloads import SEED, WORKLOADS  # noqa: E402
from tests.gcs_emulator import Emulator  # noqa: E402

_BUCKET = "tpufeed-bench"
ROWS = ["local files", "gs:// cold", "gs:// warm", "https:// cold", "https:// warm"]


class WebServerProcess:
    """tests/http_server.py serving `root` under /files/ in its own process."""

    def __init__(self, root: str):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "tests", "http_server.py"), root],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": ROOT},
        )
        self.port = int(self.proc.stdout.readline())

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def _rows(paths: list[str], urls: list[str], scratch: str, fn: Any) -> dict[str, Any]:
    """Makers of each row's epoch: (dataset maker, cache folder to empty first or None)."""
    from tpufeed.sources.array_record import ArrayRecordSource
    from tpufeed.storage.cache.shard_cache import ShardCache

    gs_cache, web_cache = os.path.join(scratch, "gs"), os.path.join(scratch, "web")
    gs_url = f"gs://{_BUCKET}/w1/*.array_record"

    def remote(where: Any, folder: str) -> Any:
        return lambda: _pipeline(ArrayRecordSource(where, cache=ShardCache(folder)), "global", fn)

    return {
        "local files": (lambda: _pipeline(ArrayRecordSource(paths), "global", fn), None),
        "gs:// cold": (remote(gs_url, gs_cache), gs_cache),
        "gs:// warm": (remote(gs_url, gs_cache), None),
        "https:// cold": (remote(urls, web_cache), web_cache),
        "https:// warm": (remote(urls, web_cache), None),
    }


def measure(paths: list[str], urls: list[str], rounds: int, scratch: str) -> dict[str, Any]:
    fn = WORKLOADS["W1"].fn
    rows = _rows(paths, urls, scratch, fn)
    runs: dict[str, list[tuple[float, float, float, int]]] = {row: [] for row in ROWS}
    cpu_s: dict[str, list[float]] = {row: [] for row in ROWS}  # this process's, threads too
    for r in range(rounds):
        # A warm row needs its cold row before it: rotate the stores, keep cold before warm.
        groups = [["local files"], ["gs:// cold", "gs:// warm"], ["https:// cold", "https:// warm"]]
        groups = groups[r % 3 :] + groups[: r % 3]
        for row in [row for group in groups for row in group]:
            make, emptied = rows[row]
            if emptied is not None:
                shutil.rmtree(emptied, ignore_errors=True)
            cpu = time.process_time()
            runs[row].append(_epoch(make))
            cpu_s[row].append(time.process_time() - cpu)
    records = runs["local files"][0][3]
    assert all(run[3] == records for row in ROWS for run in runs[row]), "a row lost records"
    return {
        "records": records,
        "bytes": sum(map(os.path.getsize, paths)),
        "rounds": rounds,
        "epoch_s": {row: [run[2] for run in runs[row]] for row in ROWS},
        "open_s": {row: [run[0] for run in runs[row]] for row in ROWS},
        "first_batch_s": {row: [run[1] for run in runs[row]] for row in ROWS},
        "cpu_s": cpu_s,
    }


def report(r: dict[str, Any]) -> str:
    mb = r["bytes"] / 1e6
    lines = [
        f"W1: {r['records']:,} records in 8 ArrayRecord shards, {mb:.1f} MB; global shuffle, "
        f"map, batch 256, 0 workers; {r['rounds']} rounds pooled",
        f"  {'row':<16}{'open s':>8}{'1st batch s':>12}{'epoch s med':>12}{'best':>8}"
        f"{'records/s med':>15}{'cpu s med':>11}",
    ]
    median = {row: statistics.median(r["epoch_s"][row]) for row in ROWS}
    for row in ROWS:
        lines.append(
            f"  {row:<16}{statistics.median(r['open_s'][row]):>8.3f}"
            f"{statistics.median(r['first_batch_s'][row]):>12.3f}{median[row]:>12.3f}"
            f"{min(r['epoch_s'][row]):>8.3f}{r['records'] / median[row]:>15,.0f}"
            f"{statistics.median(r['cpu_s'][row]):>11.3f}"
        )
    lines.append(
        f"  https / gs (epoch time, medians): cold {median['https:// cold'] / median['gs:// cold']:.2f}"
        f", warm {median['https:// warm'] / median['gs:// warm']:.2f}; warm / local: "
        f"https {median['https:// warm'] / median['local files']:.2f}, "
        f"gs {median['gs:// warm'] / median['local files']:.2f}"
    )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict[str, Any]:
    w1 = prepare(WORKLOADS["W1"], args.records, args.data_dir, SEED)
    paths = list(w1.array_record)
    scratch = tempfile.mkdtemp(prefix="tpufeed-bench-https-")
    served = os.path.join(scratch, "served")
    os.makedirs(os.path.join(served, "w1"))
    for path in paths:
        os.link(path, os.path.join(served, "w1", os.path.basename(path)))
    emulator = Emulator()
    web = None
    try:
        uploader = emulator.client()
        uploader.create_bucket(_BUCKET)
        for path in paths:
            blob = uploader.bucket(_BUCKET).blob(f"w1/{os.path.basename(path)}")
            blob.upload_from_filename(path)
        os.environ["STORAGE_EMULATOR_HOST"] = emulator.url
        web = WebServerProcess(served)
        urls = [f"http://127.0.0.1:{web.port}/files/w1/{os.path.basename(p)}" for p in paths]
        return measure(paths, urls, args.rounds, os.path.join(scratch, "caches"))
    finally:
        if web is not None:
            web.stop()
        emulator.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    compile_sources()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=50_000, help="W1 records (1 KiB each)")
    p.add_argument("--rounds", type=int, default=5, help="rounds; every row runs once a round")
    p.add_argument("--data-dir", default=os.path.join(ROOT, "benchmarks", "data"))
    p.add_argument("--json", dest="json_path", default=None, help="write the figures here")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds must be >= 1, got {args.rounds}")
    result = run(args)
    print(report(result))
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
