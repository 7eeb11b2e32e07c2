"""What it costs hosts to end every epoch together: the per-step agreement of
`tpufeed.run.hosts.uneven`.

    python -m benchmarks.agreement --processes 2 3 4 --steps 300

For each process count, that many JAX processes on localhost (`jax.distributed`, CPU devices)
each time `--steps` calls of `JaxAgreement.count` (one step's agreement through the coordination
service), and then a whole `to_jax(uneven=...)` epoch of a filtered dataset, whose statistics
give the time spent agreeing. Reported: median and 90th percentile of one agreement, to_jax
steps per agreement, the share of a loop without a training step that went to agreeing, and
the loop's wait for input with a simulated training step (the agreeing runs in the transfer
thread, ahead of the loop).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # run as a script
    sys.path.insert(0, ROOT)

from benchmarks.bytecode import compile_sources  # noqa: E402

TIMEOUT_S = 300


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(processes: int, steps: int, step_ms: float, out: Path) -> list[dict]:
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": ROOT,
    }
    port = _free_port()
    children = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "worker",
                str(pid),
                str(processes),
                str(port),
                str(steps),
                str(step_ms),
                str(out),
            ],
            env=env,
        )
        for pid in range(processes)
    ]
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while any(p.poll() is None for p in children):
            if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in children):
                raise SystemExit(f"{processes}-process run failed: {[p.poll() for p in children]}")
            time.sleep(0.1)
    finally:
        for p in children:
            if p.poll() is None:
                p.kill()
            p.wait()
    return [json.loads((out / f"agreement-{pid}.json").read_text()) for pid in range(processes)]


def worker(pid: int, processes: int, port: int, steps: int, step_ms: float, out: Path) -> None:
    import jax
    import numpy as np

    import tpufeed
    from tpufeed.run.hosts.agreement import JaxAgreement

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=processes,
        process_id=pid,
        initialization_timeout=60,
    )
    agreement = JaxAgreement("benchmark", processes)
    times = []
    for step in range(steps):
        started = time.perf_counter()
        agreement.count((step % 3 != 0, True))
        times.append(time.perf_counter() - started)
    ds = (
        tpufeed.Dataset.from_sequence(list(range(20_000)))
        .shuffle(0)
        .shard()
        .map(lambda i: {"x": np.full(64, i, np.float32)})
        .filter(lambda e: int(e["x"][0]) % 7)
        .batch(32)
    )
    result = {"call_s": times}
    for name, step_s in (("bare", 0.0), ("step", step_ms / 1e3)):
        it = ds.to_jax(uneven="pad", prefetch=2)
        started = time.perf_counter()
        for batch in it:
            jax.block_until_ready(batch["x"])
            time.sleep(step_s)  # a training step, while the transfer thread agrees ahead
        stats = it.stats()
        result[name] = {
            "loop_s": time.perf_counter() - started,
            "steps": stats.batches,
            "agreements": stats.agreements,
            "agreement_s": stats.agreement_seconds,
            "wait_fraction": it.wait_fraction,
        }
    (out / f"agreement-{pid}.json").write_text(json.dumps(result))
    jax.distributed.shutdown()


def main(argv: list[str] | None = None) -> None:
    compile_sources()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--processes", type=int, nargs="+", default=[2, 3, 4])
    p.add_argument("--steps", type=int, default=300, help="agreement calls timed alone")
    p.add_argument(
        "--step-ms",
        type=float,
        default=10.0,
        help="simulated training step of the second to_jax loop",
    )
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args(argv)
    rows = []
    print(
        "| processes | one agreement: median ms | p90 ms | to_jax steps per agreement | "
        f"agreeing / wall, no step | loop's wait with a {args.step_ms:g} ms step |"
    )
    print("|---|---|---|---|---|---|")
    for processes in args.processes:
        with tempfile.TemporaryDirectory() as tmp:
            results = run(processes, args.steps, args.step_ms, Path(tmp))
        calls = sorted(t for r in results for t in r["call_s"][10:])  # first calls warm up
        median = statistics.median(calls)
        p90 = calls[int(0.9 * (len(calls) - 1))]
        bare, step = results[0]["bare"], results[0]["step"]
        share = max(r["bare"]["agreement_s"] / r["bare"]["loop_s"] for r in results)
        wait = max(r["step"]["wait_fraction"] for r in results)
        per = bare["steps"] / max(1, bare["agreements"])
        rows.append(
            {
                "processes": processes,
                "median_ms": median * 1e3,
                "p90_ms": p90 * 1e3,
                "steps_per_agreement": per,
                "agreeing_share_no_step": share,
                "wait_fraction_with_step": wait,
                "step_ms": args.step_ms,
                "steps": step["steps"],
            }
        )
        print(
            f"| {processes} | {median * 1e3:.2f} | {p90 * 1e3:.2f} | {per:.1f} | {share:.1%} | "
            f"{wait:.1%} |"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"command": " ".join(sys.argv), "rows": rows}, indent=1)
        )


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    a = sys.argv[2:]
    worker(int(a[0]), int(a[1]), int(a[2]), int(a[3]), float(a[4]), Path(a[5]))
elif __name__ == "__main__":
    main()
