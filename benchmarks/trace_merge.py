"""What `tpufeed trace merge` costs on large files: seconds and peak memory, beside loading the
same files whole with `json.load` (what a merge that holds the files would need at least).

    python -m benchmarks.trace_merge --hosts 4 --events 200000

Each host's file is a real tpufeed trace file (a `Timeline` of `--events` complete events,
200,000 being its default ring, written by a process of its own), so the files are what a long
run leaves. Each measurement runs in a fresh process; its peak RSS is the kernel's (`wait4`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

_WRITE = """
import sys
from tpufeed.observe.timeline import Timeline
path, events = sys.argv[1], int(sys.argv[2])
recorded = Timeline(capacity=events)
for i in range(events):
    recorded.add(("map(decode)", "stage", recorded.started_ns + i * 1000, 800, 1, "MainThread",
                  {"records": 256} if i % 16 == 0 else None))
recorded.write(path)
"""

_LOAD_WHOLE = """
import json, sys
documents = [json.load(open(path)) for path in sys.argv[1:]]
print(sum(len(d["traceEvents"]) for d in documents))
"""


def run_measured(args: list[str]) -> tuple[float, float]:
    """(seconds, peak RSS in MiB) of a fresh process running `args`."""
    started = time.perf_counter()
    child = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{args[:4]} failed with exit status {child.returncode}")
    return time.perf_counter() - started, usage.ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--events", type=int, default=200_000, help="events in each file")
    parser.add_argument("--json", default=None, help="write the figures to this file too")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        files = [os.path.join(folder, f"host{i}.json") for i in range(args.hosts)]
        for path in files:
            subprocess.run([sys.executable, "-c", _WRITE, path, str(args.events)], check=True)
        out = os.path.join(folder, "pod.json")
        python = [sys.executable, "-c", "import tpufeed.cli"]
        figures = {
            "hosts": args.hosts,
            "events_per_file": args.events,
            "input_mib": sum(os.path.getsize(f) for f in files) / 2**20,
            "python_and_tpufeed_cli": run_measured(python),
            "trace_merge": run_measured(
                [sys.executable, "-m", "tpufeed.cli", "trace", "merge", *files, "-o", out]
            ),
            "json_load_whole": run_measured([sys.executable, "-c", _LOAD_WHOLE, *files]),
            "output_mib": os.path.getsize(out) / 2**20,
        }
    for name in ("python_and_tpufeed_cli", "trace_merge", "json_load_whole"):
        seconds, rss = figures[name]
        figures[name] = {"seconds": round(seconds, 2), "peak_rss_mib": round(rss, 1)}
    print(json.dumps(figures, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
