"""One timeline for the pod, from real multi-process runs on localhost: 4 JAX processes
(`jax.distributed`, its coordination service) and 3 torch.distributed gloo processes (its
TCPStore). Each records its share of a pipeline into its own trace file, then, right after a
barrier all leave together, an instant `synced`. Process 1's clocks (trace and wall) read
`SKEW_NS` ahead of the machine's, as a host with a clock of its own would: every process here
shares one machine, so the true offsets are SKEW_NS for process 1 and 0 for the others.

`tpufeed trace merge` (the command, as users run it) must make one Chrome trace with a process
group per host, each host's measured offset within its stated bound of the true one, and the
`synced` instants together again on process 0's clock (7.5 s apart before the shift).

This file is also the worker: `python tests/semantics/test_multihost_trace.py worker ...`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

SKEW_NS = 7_500_000_000
TIMEOUT_S = 150
SYNC_SPREAD_S = 1.0  # a barrier's release reaches every process within this, even loaded

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(runtime: str, processes: int, out: Path, silent_0: bool = False) -> list[dict]:
    """Runs the workers to completion; kills them all if one fails or time runs out.
    `silent_0`: process 0 records no timeline (so it answers no clock measurement)."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    port = _free_port()
    children = []
    for pid in range(processes):
        args = [sys.executable, __file__, "worker", runtime, str(pid), str(processes), str(port)]
        args.append("silent_0" if silent_0 else "all")
        log = open(out / f"log-{pid}.txt", "w")
        children.append(
            (
                subprocess.Popen([*args, str(out)], env=env, stdout=log, stderr=subprocess.STDOUT),
                log,
            )
        )
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while any(p.poll() is None for p, _ in children):
            failed = [i for i, (p, _) in enumerate(children) if p.poll() not in (None, 0)]
            if failed or time.monotonic() > deadline:
                why = f"process {failed[0]} failed" if failed else f"timed out after {TIMEOUT_S} s"
                raise AssertionError(f"{runtime} run {why}\n" + _logs(out, processes))
            time.sleep(0.1)
    finally:
        for p, log in children:
            if p.poll() is None:
                p.kill()
            p.wait()
            log.close()
    return [json.loads((out / f"result-{pid}.json").read_text()) for pid in range(processes)]


def _logs(out: Path, processes: int) -> str:
    return "\n".join(
        f"--- process {pid} ---\n{(out / f'log-{pid}.txt').read_text()[-3000:]}"
        for pid in range(processes)
    )


def merge(out: Path, processes: int) -> tuple[dict, dict, str]:
    """`tpufeed trace merge` over the hosts' files, in reverse order: its --json document,
    the merged file, and what it prints without --json."""
    files = [str(out / f"host{pid}.json") for pid in reversed(range(processes))]
    command = [sys.executable, "-m", "tpufeed.cli", "trace", "merge", *files, "-o"]
    done = subprocess.run(
        [*command, str(out / "pod.json"), "--json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    printed = subprocess.run(
        [*command, str(out / "pod2.json")], capture_output=True, text=True, timeout=120
    )
    assert printed.returncode == 0, printed.stderr
    return json.loads(done.stdout), json.loads((out / "pod.json").read_text()), printed.stdout


@pytest.mark.parametrize(("runtime", "processes"), [("jax", 4), ("torch", 3)])
def test_the_hosts_files_merge_into_one_timeline_on_one_clock(tmp_path, runtime, processes):
    if runtime == "torch":
        pytest.importorskip("torch.distributed")
    results = launch(runtime, processes, tmp_path)
    document, pod, printed = merge(tmp_path, processes)
    hosts = {h["host"]: h for h in document["hosts"]}
    assert sorted(hosts) == list(range(processes))
    for pid, result in enumerate(results):
        true = SKEW_NS if pid == 1 else 0
        host = hosts[pid]
        assert host["aligned_by"] == "measured offset" and host["note"] is None, host
        assert abs(host["offset_ns"] - true) <= host["error_ns"], host
        assert (host["hostname"], host["pid"]) == (socket.gethostname(), result["pid"])
    worst = max(h["error_ns"] for h in document["hosts"])
    assert document["alignment"]["max_error_ns"] == worst
    assert 0 < document["alignment"]["drift_span_s"] < TIMEOUT_S  # measured at the start
    assert f"alignment: within ±{worst / 1e6:.3f} ms of process 0's clock" in printed

    groups = {
        e["pid"]: e["args"]["name"] for e in pod["traceEvents"] if e["name"] == "process_name"
    }
    assert sorted(groups.values()) == [
        f"host {i}: {socket.gethostname()} (pid {r['pid']})" for i, r in enumerate(results)
    ]
    events = [e for e in pod["traceEvents"] if e["ph"] != "M"]
    assert {e["pid"] for e in events} == set(groups)  # every host's events, in its group
    for group in groups:
        assert any(e["name"] == "next" and e["pid"] == group for e in events)
    synced = [e["ts"] for e in events if e["name"] == "synced"]
    assert len(synced) == processes
    assert (max(synced) - min(synced)) / 1e6 < SYNC_SPREAD_S, synced  # 7.5 s apart unshifted
    assert pod["otherData"]["alignment"] == document["alignment"]


def test_a_host_whose_process_0_never_answers_is_aligned_by_wall_clock(tmp_path):
    """Process 0 records no timeline, so nobody answers host 1's clock measurement: host 1's
    run is not held up, its file is written within the write's bound (2 s here) without an
    offset and a warning saying why, and the merge aligns it by wall clock only."""
    pytest.importorskip("torch.distributed")
    launch("torch", 2, tmp_path, silent_0=True)
    assert (
        "the clock offset to process 0 was still being measured after 2 s"
        in (tmp_path / "log-1.txt").read_text()
    )
    other = json.loads((tmp_path / "host1.json").read_text())["otherData"]
    assert other["pod_clock"] is None
    done = subprocess.run(
        [sys.executable, "-m", "tpufeed.cli", "trace", "merge", str(tmp_path / "host1.json")]
        + ["-o", str(tmp_path / "pod.json"), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["hosts"][0]["aligned_by"] == "wall clock only"
    assert "aligned by wall clock only" in document["alignment"]["statement"]


# -- the worker -------------------------------------------------------------------------------


def _skew_clocks() -> None:
    """This process's clocks read SKEW_NS ahead (before tpufeed binds the trace clock)."""
    trace_clock, wall_clock = time.perf_counter_ns, time.time_ns
    time.perf_counter_ns = lambda: trace_clock() + SKEW_NS
    time.time_ns = lambda: wall_clock() + SKEW_NS


def _worker(runtime: str, pid: int, processes: int, port: int, out: Path, who: str) -> None:
    if pid == 1:
        _skew_clocks()
    import tpufeed
    from tpufeed.observe import pod_clock, timeline

    pod_clock.WRITE_WAIT_S = 2.0  # keeps a test of a silent process 0 short

    if runtime == "jax":
        import jax

        jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=processes, process_id=pid)
        from jax._src.distributed import global_state

        def barrier(name: str) -> None:
            global_state.client.wait_at_barrier(f"tpufeed-test-{name}", 60_000)
    else:
        from datetime import timedelta

        import torch.distributed as dist

        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=pid,
            world_size=processes,
            timeout=timedelta(seconds=60),
        )

        def barrier(name: str) -> None:
            dist.barrier()

    ds = tpufeed.Dataset.from_sequence(range(96)).shard(pid, processes).batch(4)
    if who == "silent_0" and pid == 0:
        for _ in ds:
            pass
        barrier("synced")
    else:
        with tpufeed.trace(out / f"host{pid}.json"):
            for _ in ds:
                pass
            barrier("synced")
            timeline.instant("synced")
    (out / f"result-{pid}.json").write_text(json.dumps({"pid": os.getpid()}))
    barrier("written")  # process 0 serves the store: it stays until every process has written
    if runtime == "jax":
        jax.distributed.shutdown()
    else:
        dist.destroy_process_group()


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    runtime, pid, processes, port, who, out = sys.argv[2:8]
    _worker(runtime, int(pid), int(processes), int(port), Path(out), who)
