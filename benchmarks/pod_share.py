"""What sharing the pod's summary costs a host (issue 46 item 1): W1 with 2 workers, sharing on
against sharing off, side by side.

    python -m benchmarks.pod_share --rounds 3 --passes 3 --interval 1 --json out.json

Each row runs in its own process, as host 0 of a real two-host torch.distributed run (gloo on
127.0.0.1; host 1 is a helper process that only waits), so that sharing starts as it does on a
pod: with the first iterator (`tpufeed.run.hosts.pod.share`). The rows differ only in
`options(pod_interval_s=...)`: `--interval` seconds ("on"; the default is 30 s, so 1 s shares
thirty times as often as a user's run does) or None ("off"). Host 0 does the most of any host:
each interval it writes its summary, reads every host's and judges them. Each row reads W1's
200,000 1 KiB records (shuffled, W1's decode, batches of 256, 2 workers): one warm-up pass,
then `--passes` timed passes, pooled over `--rounds` (the rows alternate). Also reported: the
CPU time of the sharing thread itself (`tpufeed-pod`) over the timed passes, and its rounds.
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
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.bytecode import compile_sources  # noqa: E402
from benchmarks.datafiles import prepare  # noqa: E402
from benchmarks.workloads import BATCH_SIZE, SEED, WORKLOADS, decode_w1  # noqa: E402

ROWS = ("off", "on")
TARGET = 0.99  # on / off: sharing costs at most 1% of W1's rate


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _join(rank: int, port: int) -> None:
    """This process as host `rank` of a two-host torch.distributed run."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)


def helper(port: int, interval: float | None) -> None:
    """Host 1: joins the run, starts an iterator (which shares, in the "on" row) and waits for
    host 0 to finish."""
    import torch.distributed as dist

    import tpufeed

    _join(1, port)
    it = iter(tpufeed.Dataset.from_sequence([0]).repeat().options(pod_interval_s=interval))
    next(it)
    dist.barrier()
    it.close()
    dist.destroy_process_group()


def _thread_cpu_s() -> float:
    """CPU seconds of the sharing thread so far (0 where it does not run)."""
    for thread in threading.enumerate():
        if thread.name == "tpufeed-pod" and thread.ident is not None:
            return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    return 0.0


def measure(row: str, paths: list[str], records: int, passes: int, interval: float) -> dict:
    import torch.distributed as dist

    import tpufeed
    from tpufeed.run.hosts import pod

    port = _free_port()
    given = interval if row == "on" else None
    command = [sys.executable, __file__, "--helper", str(port), "--interval", str(given)]
    other = subprocess.Popen(command, cwd=ROOT)
    _join(0, port)
    ds = (
        tpufeed.Dataset.from_array_record(paths)
        .shuffle(SEED)
        .map(decode_w1)
        .batch(BATCH_SIZE)
        .repeat()
        .workers(2)
        .options(pod_interval_s=given)
    )
    it = ds.iterator()
    seen, marks, cpu = 0, [], []
    started = time.perf_counter()
    for batch in it:
        seen += len(batch["x"])
        if seen >= records * (len(marks) + 1):
            marks.append(time.perf_counter())
            cpu.append(_thread_cpu_s())
            if len(marks) == passes + 1:
                break
    it.close()
    read = pod.latest()  # what process 0 last read of the pod: None where nothing is shared
    dist.barrier()
    dist.destroy_process_group()
    other.wait(timeout=60)
    return {
        "row": row,
        "first_mark_s": marks[0] - started,
        "rates": [records / (b - a) for a, b in zip(marks, marks[1:])],
        "sharing_cpu_s": cpu[-1] - cpu[0],
        "timed_s": marks[-1] - marks[0],
        "hosts_read": [s.host for s in read.hosts] if read is not None else [],
    }


def _run_row(row: str, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "row.json")
        command = [sys.executable, "-m", "benchmarks.pod_share", "--row", row, "--json", out]
        command += ["--passes", str(args.passes), "--records", str(args.records)]
        command += ["--interval", str(args.interval), "--data-dir", args.data_dir]
        subprocess.run(command, cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": ROOT})
        with open(out) as f:
            return json.load(f)


def main(argv: list[str] | None = None) -> int:
    compile_sources()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--passes", type=int, default=3)
    p.add_argument(
        "--interval",
        type=lambda text: None if text == "None" else float(text),
        default=1.0,
        help="pod_interval_s of the 'on' row",
    )
    p.add_argument("--records", type=int, default=WORKLOADS["W1"].default_records)
    p.add_argument("--data-dir", default=os.path.join(ROOT, "benchmarks", "data"))
    p.add_argument("--json", default=None)
    p.add_argument("--row", default=None, help=argparse.SUPPRESS)
    p.add_argument("--helper", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.helper is not None:
        helper(args.helper, args.interval)
        return 0
    paths = list(prepare(WORKLOADS["W1"], args.records, args.data_dir, SEED).array_record)
    if args.row:
        with open(args.json, "w") as f:
            json.dump(measure(args.row, paths, args.records, args.passes, args.interval), f)
        return 0
    results: dict[str, list[dict]] = {row: [] for row in ROWS}
    for round_number in range(args.rounds):
        for row in ROWS if round_number % 2 == 0 else ROWS[::-1]:
            results[row].append(_run_row(row, args))
            rates = results[row][-1]["rates"]
            print(
                f" round {round_number + 1}: sharing {row:<3} "
                f"{statistics.median(rates):>10,.0f} records/s",
                flush=True,
            )
    _report(results, args, argv)
    return 0


def _report(results: dict[str, list[dict]], args: argparse.Namespace, argv: list[str] | None):
    rate = {row: statistics.median(r for x in results[row] for r in x["rates"]) for row in ROWS}
    ratio = rate["on"] / rate["off"]
    cpu = sum(x["sharing_cpu_s"] for x in results["on"])
    timed = sum(x["timed_s"] for x in results["on"])
    command = "python -m benchmarks.pod_share " + " ".join(argv or sys.argv[1:])
    print(f"\n{command}\n| sharing | records/s (median of {args.rounds * args.passes} passes) |")
    print(f"|---|---|\n| off | {rate['off']:,.0f} |\n| on, every {args.interval:g} s | ", end="")
    print(f"{rate['on']:,.0f} |\n\non / off: {ratio:.3f} (target >= {TARGET}: at most 1% slower) ")
    print(f"{'met' if ratio >= TARGET else 'NOT met'}")
    read = {row: sorted({tuple(x["hosts_read"]) for x in results[row]}) for row in ROWS}
    print(f"hosts whose summaries process 0 read at the end of each row: {read}")
    print(
        f"the sharing thread's CPU: {cpu * 1e3:.1f} ms over {timed:.1f} s of timed passes "
        f"({cpu / timed:.4%} of one core; {cpu / max(timed / args.interval, 1) * 1e3:.2f} ms "
        "a round)"
    )
    if args.json:
        with open(args.json, "w") as f:
            summary = {"command": command, "interval_s": args.interval, "ratio": ratio}
            summary |= {"rates": rate, "sharing_cpu_s": cpu, "timed_s": timed, "rows": results}
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
