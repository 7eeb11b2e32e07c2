"""Two versions of `tpufeed/storage/retry.py` retrying the same reads under the same faults.

    git show 483e9d8:tpufeed/storage/retry.py > /tmp/retry_before.py  # the hand-written loop
    python -m benchmarks.gcs_retry /tmp/retry_before.py tpufeed/storage/retry.py

Since issue 29 `call_with_retry` runs on `google.api_core.retry.retry_target` (its loop,
predicate, on_error and exception_factory), with tpufeed's cap on attempts, per-request
timeouts from what is left of the deadline, counters and named errors around it; before, the
loop was hand-written. Starts `gcp-storage-emulator` behind the tests' fault proxy
(tests/gcs_emulator.py), uploads one 4 MiB object and reads it as `--reads` byte ranges of
64 KiB (`gcs.read_range`, one at a time) while the proxy fails requests: 10% answered
halfway then cut (a short read), 5% 503, 5% reset before answering. The same faults come in
the same order for both files (the proxy's rng is reseeded before each run), and backoffs are
1-2 ms, so the time is the requests' and the loop's, not random sleeps. Each round runs both,
the order flipped every round; the table gives the median seconds per run, their ratio, and
the retries and requests counted in the last run against the faults injected.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.gcs_emulator import Emulator, FaultProxy  # noqa: E402
from tpufeed.observe import counts  # noqa: E402
from tpufeed.storage.retry import RetryPolicy  # noqa: E402
from tpufeed.storage.stores import gcs  # noqa: E402

_BUCKET = "tpufeed-retry-bench"
_SIZE, _PART = 4 << 20, 64 << 10
POLICY = RetryPolicy(attempts=10, deadline_s=60, initial_backoff_s=0.001, max_backoff_s=0.002)


def load_loop(path: str, name: str) -> Callable[..., Any]:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = sys.modules[name] = importlib.util.module_from_spec(spec)  # for its dataclass
    spec.loader.exec_module(module)
    return module.call_with_retry


def read_all(obj: gcs.GcsObject, reads: int) -> bytes:
    parts = []
    for i in range(reads):
        start = (i * _PART) % (_SIZE - _PART)
        parts.append(gcs.read_range(obj, start, start + _PART, POLICY))
    return b"".join(parts)


def run(way: Callable[..., Any], proxy: FaultProxy, obj: gcs.GcsObject, reads: int) -> tuple:
    gcs.call_with_retry = way  # type: ignore[assignment]
    proxy.set_faults(cut=0.10, error_503=0.05, reset=0.05, seed=7)
    before = counts.snapshot()
    started = time.perf_counter()
    data = read_all(obj, reads)
    seconds = time.perf_counter() - started
    counted = counts.since(before)
    return seconds, data, counted["gcs_retries"], counted["gcs_requests"], proxy.counters.faults


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("before", help="a retry.py")
    p.add_argument("after", help="another retry.py")
    p.add_argument("--reads", type=int, default=300)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args(argv)
    emulator = Emulator()
    proxy = FaultProxy(emulator.port)
    try:
        emulator.client().create_bucket(_BUCKET).blob("blob").upload_from_string(
            random.Random(0).randbytes(_SIZE)
        )
        os.environ["STORAGE_EMULATOR_HOST"] = proxy.url
        obj = gcs.stat_object(_BUCKET, "blob")
        ways = {
            "before": load_loop(args.before, "retry_before"),
            "after": load_loop(args.after, "retry_after"),
        }
        times: dict[str, list[float]] = {way: [] for way in ways}
        last: dict[str, tuple] = {}
        expected = None
        for r in range(args.rounds):
            order = list(ways.items())
            for way, fn in order if r % 2 else order[::-1]:
                proxy.reset()
                seconds, data, *figures = run(fn, proxy, obj, args.reads)
                expected = expected or data
                if data != expected:
                    raise SystemExit(f"{way} read different bytes")
                times[way].append(seconds)
                last[way] = tuple(figures)
        a, b = statistics.median(times["before"]), statistics.median(times["after"])
        print(f"{args.rounds} rounds of {args.reads} reads of 64 KiB; median seconds per run")
        print("| loop | seconds | retries | requests | faults injected |")
        print("|---|---|---|---|---|")
        for way, seconds in (("before", a), ("after", b)):
            retries, requests, faults = last[way]
            print(f"| {way} | {seconds:.3f} | {retries} | {requests} | {faults} |")
        print(f"before / after time: {a / b:.3f}")
    finally:
        proxy.stop()
        emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
