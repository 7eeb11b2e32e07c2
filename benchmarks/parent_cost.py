"""Where the parent's CPU goes per batch, with workers: a breakdown of `next()` by step.

    python -m benchmarks.parent_cost --workers 1 --step-ms 5 --batches 1500

Runs W1 (`from_array_record(...).shuffle().map().batch(256)`) with isolated workers, and the
loop spends `--step-ms` of its own CPU after each batch, as a training step would, so answers
are waiting when the next batch is asked for: what is left in `next()` is the parent's own work.
Each step is the thread CPU time (`time.thread_time`) of a few functions of the worker engine,
wrapped for the run; a wrapper costs ~2-4 µs itself (two clock reads), so the parts add up to a
little more than the whole without them. Steps are nested: indented ones are part of the one
above.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.bytecode import compile_sources  # noqa: E402

_spent: collections.Counter = collections.Counter()


def _timed(owner: Any, name: str, label: str) -> None:
    """Replaces `owner.name` with a version that adds its thread CPU time to `label`."""
    fn: Callable = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            _spent[label] += time.thread_time() - started

    setattr(owner, name, timed)


def main(argv: list[str] | None = None) -> int:
    compile_sources()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--step-ms", type=float, default=5.0)
    ap.add_argument("--batches", type=int, default=1500)
    ap.add_argument("--records", type=int, default=None, help="records of W1 (default its own)")
    ap.add_argument("--data-dir", default=os.path.join(ROOT, "benchmarks", "data"))
    args = ap.parse_args(argv)

    import tpufeed
    from benchmarks.datafiles import prepare
    from benchmarks.workloads import BATCH_SIZE, SEED, WORKLOADS
    from tpufeed.run import walk
    from tpufeed.run.workers import dealer, engine, inbox, leases, pool

    steps = [
        (dealer.Dealer, "deal", "deal: the next chunk, dealt"),
        (walk._Blocks, "get", "  walk: the chunk's record indices"),
        (dealer, "encode_task", "  encode_task"),
        (pool.WorkerPool, "send", "  send (a pipe write)"),
        (leases.Leases, "returned", "  slots given back"),
        (pool.WorkerPool, "ready", "  workers ready?"),
        (pool.WorkerPool, "receive_any", "receive_any: poll, read, decode"),
        (inbox.Inbox, "read", "  read every answer waiting, decode them"),
        (inbox, "decode_result", "    decode one answer"),
        (engine.WorkerExecutor, "_received", "_received: the batch's views, lent"),
        (engine, "read_batch", "  views of the slot"),
        (leases.Leases, "lend", "  the lease"),
    ]
    for owner, name, label in steps:
        _timed(owner, name, label)

    spec = WORKLOADS["W1"]
    files = prepare(spec, args.records or spec.default_records, args.data_dir, SEED)
    ds = (
        tpufeed.Dataset.from_array_record(list(files.array_record))
        .shuffle(SEED)
        .map(spec.fn)
        .batch(BATCH_SIZE)
        .repeat()
        .workers(args.workers, isolate=True)
    )
    it = iter(ds)
    for _ in range(100):  # the workers started and warm
        next(it)
    _spent.clear()
    total = 0.0
    for _ in range(args.batches):
        started = time.thread_time()
        next(it)
        total += time.thread_time() - started
        until = time.thread_time() + args.step_ms / 1000
        while time.thread_time() < until:  # the training step
            pass
    it.close()
    per = 1e6 / args.batches
    print(
        f"W1, {args.workers} isolated worker(s), a {args.step_ms:g} ms step after each batch "
        f"of {BATCH_SIZE}: next() {total * per:.0f} µs of CPU a batch "
        f"({total * per / BATCH_SIZE:.2f} µs a record)"
    )
    for _, _, label in steps:
        print(f"  {label}: {_spent[label] * per:.0f} µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
