"""tpufeed's fork server against the standard library's `forkserver` context, on W1, in turns.

    python -m benchmarks.forkserver_ab [--rounds 7] [--workers 2] [--data-dir DIR]

Each run is a fresh interpreter (a user's script): W1 (`from_array_record(...).shuffle(0)
.map(decode_w1).batch(256).workers(N)`, 200,000 x 1 KiB records in 8 shards) read for two
epochs, each by a new iterator. It reports the first batch (from `iter` to the first `next`,
the fork server started from nothing), the rate of epoch 1 and of epoch 2 (the server warm,
new workers forked from it). The two sides:

  tpufeed   tpufeed/run/workers/forkserver.py: started without waiting for it, workers asked
            for over a socket, forked with the parent's environment, directory and sys.path
            of now, and without importing the user's `__main__`
  stdlib    `multiprocessing.get_context("forkserver")` with `set_forkserver_preload` of the
            same modules (`forkserver_process.PRELOAD`); each worker a `Process` whose target runs the
            same `worker.main` on the same pipes (passed as file descriptors by the context)

Rows run in turns, the order flipped every round; medians and their ratio. What the stdlib's
context would change besides speed is in benchmarks/RESULTS.md (issue 29).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Fd:
    """A file descriptor that travels to a `forkserver` child (the context sends it)."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self) -> Any:
        from multiprocessing import reduction

        return _received, (reduction.DupFd(self.fd),)


def _received(dup: Any) -> int:
    return dup.detach()


def _stdlib_worker(task: int, result: int, parent: int, beacon: int) -> None:
    from tpufeed.run.workers import worker

    worker.main([str(task), str(result), str(parent), str(beacon)])


class _StdlibProcess:
    """A `multiprocessing.Process` with the parts of `subprocess.Popen` the pool uses."""

    def __init__(self, process: Any):
        self.process = process
        self.pid = process.pid

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int | None:
        self.process.join(timeout)
        if self.process.exitcode is None:
            raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
        return self.process.exitcode

    def kill(self) -> None:
        self.process.kill()

    def terminate(self) -> None:
        self.process.terminate()


def use_stdlib_forkserver() -> None:
    """Workers started by the standard library's fork server from here on."""
    import multiprocessing

    from tpufeed.observe import counts
    from tpufeed.run.workers import forkserver_process
    from tpufeed.run.workers.pool import WorkerPool

    os.environ["TPUFEED_FORKSERVER"] = "0"  # tpufeed's own is not started
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as tpufeed's server starts (numpy)
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(forkserver_process.PRELOAD))

    def spawn(self: Any, index: int, server: Any, task_r: int, result_w: int, env: Any) -> Any:
        args = (_Fd(task_r), _Fd(result_w), os.getpid(), _Fd(self._beacon_fd))
        process = context.Process(target=_stdlib_worker, args=args, daemon=True)
        process.start()
        counts.count("workers_started")
        return _StdlibProcess(process)

    WorkerPool._spawn = spawn  # type: ignore[method-assign]


def child(side: str, data_dir: str, workers: int) -> None:
    if side == "stdlib":
        use_stdlib_forkserver()
    import tpufeed
    from benchmarks.workloads import BATCH_SIZE, decode_w1

    files = sorted(glob.glob(os.path.join(data_dir, "*.array_record")))
    ds = tpufeed.Dataset.from_array_record(files).shuffle(0).map(decode_w1).batch(BATCH_SIZE)
    ds = ds.workers(workers)
    out: dict[str, float] = {}
    for epoch in (1, 2):
        started = time.perf_counter()
        it = iter(ds)
        records = len(next(it)["x"])
        if epoch == 1:
            out["first"] = time.perf_counter() - started
        records += sum(len(b["x"]) for b in it)
        it.close()
        out[f"epoch{epoch}"] = records / (time.perf_counter() - started)
    print(json.dumps(out))


def run_child(side: str, data_dir: str, workers: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = ROOT
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.forkserver_ab", "--child", side],
        cwd=ROOT,
        env={**env, "BENCH_DATA": data_dir, "BENCH_WORKERS": str(workers)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{side} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--data-dir", default=os.path.join(ROOT, "benchmarks", "data", "W1-200000-seed0")
    )
    p.add_argument("--child", choices=["tpufeed", "stdlib"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child, os.environ["BENCH_DATA"], int(os.environ["BENCH_WORKERS"]))
        return 0
    sides = ["tpufeed", "stdlib"]
    for side in sides:
        run_child(side, args.data_dir, args.workers)  # bytecode written, page cache warm
    got: dict[str, dict[str, list[float]]] = {s: {} for s in sides}
    for r in range(args.rounds):
        for side in sides if r % 2 else sides[::-1]:
            for what, value in run_child(side, args.data_dir, args.workers).items():
                got[side].setdefault(what, []).append(value)
    print(f"W1, {args.workers} workers, {args.rounds} rounds; medians")
    print("| figure | tpufeed's fork server | stdlib forkserver | stdlib / tpufeed's |")
    print("|---|---|---|---|")
    labels = {"first": "first batch, s", "epoch1": "epoch 1, rec/s", "epoch2": "epoch 2, rec/s"}
    for what, label in labels.items():
        a, b = statistics.median(got["tpufeed"][what]), statistics.median(got["stdlib"][what])
        print(f"| {label} | {a:,.3f} | {b:,.3f} | {b / a:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
