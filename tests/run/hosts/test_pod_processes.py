"""The pod's verdict with real processes on localhost (issue 46 item 1): 4 JAX processes
(jax.distributed on 127.0.0.1) and 3 torch.distributed gloo processes.

Every process feeds the same pipeline, one training step of STEP_S a batch; on host `slow`
alone the pipeline's `decode` sleeps, so its input holds the step. Every host shares its summary
every INTERVAL_S through the run's own store (`tpufeed.run.hosts.pod`), and process 0 must log
that host and its stage within two intervals of that host's start. Then `victim` is killed:
process 0 goes on stepping without waiting for it, says it has shared nothing, and
`pod_stats()` (on process 0 and on another host) returns at once with the victim's last
summary, older. Process 0 also serves its metrics and scrapes them: the pod's figures,
labelled by host.

This file is also the worker: `python tests/run/hosts/test_pod_processes.py worker ...`.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

INTERVAL_S = 0.5  # each host shares this often here (30 s by default)
STEP_S = 0.01  # the training step each process sleeps per batch
SLOW_S = 0.01  # the slow host's decode, per record (4 records a batch)
SLACK_S = 1.0  # scheduling on a loaded 2-core machine, beyond the two intervals
RUN_S = 120  # the most one run of processes may take here

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow, pytest.mark.timeout(300)]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(runtime: str, processes: int, out: Path, **spec) -> tuple[list, list]:
    """The workers, each with its log file."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    given = json.dumps({"runtime": runtime, "port": _free_port(), **spec})
    children, logs = [], []
    for pid in range(processes):
        args = [sys.executable, __file__, "worker", str(pid), str(processes), str(out), given]
        logs.append(open(out / f"log-{pid}.txt", "w"))
        children.append(subprocess.Popen(args, env=env, stdout=logs[-1], stderr=subprocess.STDOUT))
    return children, logs


def _end(children: list, logs: list) -> None:
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait()
    for log in logs:
        log.close()


def _run(runtime: str, processes: int, out: Path, slow: int, victim: int) -> list[dict]:
    """Starts the workers, kills `victim` once process 0 has named the slow host, and gives
    each survivor's result."""
    children, logs = _start(runtime, processes, out, mode="verdict", slow=slow, victim=victim)
    deadline = time.monotonic() + RUN_S
    try:
        while not (out / "named").exists():
            _check(children, out, deadline, victim, "process 0 to name the slow host")
        children[victim].send_signal(signal.SIGKILL)
        (out / "killed").write_text(str(time.time()))
        while any(c.poll() is None for i, c in enumerate(children) if i != victim):
            _check(children, out, deadline, victim, "the survivors to end")
    finally:
        _end(children, logs)
    codes = [c.returncode for c in children]
    assert codes[victim] == -signal.SIGKILL and all(
        code == 0 for i, code in enumerate(codes) if i != victim
    ), _logs(out, processes, f"exit codes {codes}")
    return [
        json.loads((out / f"result-{pid}.json").read_text())
        for pid in range(processes)
        if pid != victim
    ]


def _check(children: list, out: Path, deadline: float, victim: int, waiting_for: str) -> None:
    failed = [i for i, c in enumerate(children) if c.poll() not in (None, 0) and i != victim]
    if failed or time.monotonic() > deadline:
        why = f"process {failed[0]} exited with {children[failed[0]].poll()}" if failed else "hung"
        raise AssertionError(_logs(out, len(children), f"{why} waiting for {waiting_for}"))
    time.sleep(0.05)


def _logs(out: Path, processes: int, why: str) -> str:
    return why + "".join(
        f"\n--- process {p}:\n{(out / f'log-{p}.txt').read_text()[-3000:]}"
        for p in range(processes)
    )


def _check_verdict(results: list[dict], processes: int, slow: int, victim: int) -> None:
    zero = results[0]
    named = [(t, line) for t, line in zero["lines"] if "holds the step" in line]
    assert named, zero["lines"]
    at, line = named[0]
    assert line.startswith(f"tpufeed: host {slow} of {processes} holds the step: input wait "), line
    assert "bottleneck: map(decode)" in line and "cores" in line, line
    # within two intervals of the slow host's start (its first summary covers one interval)
    assert at - zero["slow_started"] <= 2 * INTERVAL_S + SLACK_S, (at - zero["slow_started"], line)
    assert len(named) == 1, named  # said once, not every interval
    silent = [line for _, line in zero["lines"] if "shared nothing" in line]
    assert len(silent) == 1 and f"host {victim} of {processes}" in silent[0], zero["lines"]
    assert zero["steps_after_kill"] > 0  # process 0 never waited for the killed host
    for result in results:  # process 0 and another host read every host, the victim aged
        pod = result["pod"]
        assert pod["host_count"] == processes and pod["missing"] == []
        ages = {s["host"]: s["age_s"] for s in pod["hosts"]}
        assert sorted(ages) == list(range(processes))
        assert ages[victim] > 2 * INTERVAL_S and ages[0] < ages[victim], ages
        waits = {s["host"]: s["wait_fraction"] for s in pod["hosts"]}
        assert waits[slow] == max(waits.values()), waits
        assert pod["verdict"].startswith(f"host {slow} of {processes} holds the step"), pod


def test_four_jax_processes_name_the_slow_host_and_its_stage_and_never_wait_for_a_killed_one(
    tmp_path,
):
    results = _run("jax", 4, tmp_path, slow=2, victim=3)
    _check_verdict(results, 4, slow=2, victim=3)
    metrics = results[0]["metrics"]
    for host in range(4):
        assert f'tpufeed_pod_input_wait_ratio{{host="{host}"}}' in metrics
        assert f'tpufeed_pod_summary_age_seconds{{host="{host}"}}' in metrics
    assert 'tpufeed_pod_bottleneck{host="2",stage="map(decode)"} 1.0' in metrics
    assert results[1]["metrics"] is None  # only process 0 reads the pod for its metrics


def test_three_torch_gloo_processes_name_the_slow_host_and_its_stage(tmp_path):
    results = _run("torch", 3, tmp_path, slow=1, victim=2)
    _check_verdict(results, 3, slow=1, victim=2)


def test_pod_stats_names_a_store_that_does_not_answer_instead_of_hanging(tmp_path):
    """torch.distributed's store is served by rank 0: stopped (SIGSTOP), it answers nobody."""
    children, logs = _start("torch", 2, tmp_path, mode="store_stopped")
    deadline = time.monotonic() + RUN_S
    try:
        while not all((tmp_path / f"started-{pid}").exists() for pid in (0, 1)):
            _check(children, tmp_path, deadline, -1, "both processes to iterate")
        children[0].send_signal(signal.SIGSTOP)
        (tmp_path / "stopped").touch()
        while children[1].poll() is None:
            _check(children, tmp_path, deadline, 0, "process 1's pod_stats")
    finally:
        _end(children, logs)
    assert children[1].returncode == 0, _logs(tmp_path, 2, "process 1 failed")
    result = json.loads((tmp_path / "result-1.json").read_text())
    assert result["error"] == "HostLostError" and result["hosts"] == [0], result
    assert result["message"].startswith(
        "pod_stats: torch.distributed's store (served by rank 0, or by torchrun's agent) did not "
        "answer within 1 s"
    ), result


def test_three_torch_gloo_processes_all_slow_make_the_pod_input_bound_not_one_host(tmp_path):
    children, logs = _start("torch", 3, tmp_path, mode="verdict", slow="all", victim=None)
    deadline = time.monotonic() + RUN_S
    try:
        while any(c.poll() is None for c in children):
            _check(children, tmp_path, deadline, -1, "the processes to end")
    finally:
        _end(children, logs)
    zero = json.loads((tmp_path / "result-0.json").read_text())
    said = [line for _, line in zero["lines"]]
    assert said and said[0].startswith("tpufeed: the pod is input-bound: input wait "), said
    assert "bottleneck: map(decode) on 3 of 3 hosts" in said[0], said
    assert not any("holds the step" in line for line in said), said
    assert zero["pod"]["verdict"].startswith("the pod is input-bound"), zero["pod"]


# -- the worker -------------------------------------------------------------------------------


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.created, record.getMessage()))


def _init(runtime: str, pid: int, processes: int, port: int) -> None:
    if runtime == "jax":
        import jax

        jax.distributed.initialize(
            coordinator_address=f"127.0.0.1:{port}",
            num_processes=processes,
            process_id=pid,
            initialization_timeout=60,
            heartbeat_timeout_seconds=60,  # far above this run: JAX never aborts it
        )
        from jax._src.distributed import global_state

        global_state.client.wait_at_barrier("pod-start", 60_000)
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
        dist.barrier()


def _store_stopped(pid: int, out: Path) -> None:
    """Shares, then (process 1) asks for the pod once process 0, the store's server, is
    stopped."""
    import tpufeed

    it = iter(tpufeed.Dataset.from_sequence(list(range(100))).options(pod_interval_s=INTERVAL_S))
    next(it)
    (out / f"started-{pid}").touch()
    while pid == 0 or not (out / "stopped").exists():  # process 0 waits to be stopped
        time.sleep(0.05)
    try:
        tpufeed.pod_stats(timeout_s=1)
        result = {"error": None}
    except tpufeed.HostLostError as e:
        result = {"error": type(e).__name__, "message": str(e), "hosts": list(e.hosts)}
    (out / f"result-{pid}.json").write_text(json.dumps(result))
    os._exit(0)


def _worker(pid: int, processes: int, out: Path, spec: dict) -> None:
    import tpufeed

    if spec["mode"] == "store_stopped":
        _init(spec["runtime"], pid, processes, spec["port"])
        _store_stopped(pid, out)
    lines = _Lines()
    logging.getLogger("tpufeed").addHandler(lines)
    _init(spec["runtime"], pid, processes, spec["port"])
    slow = spec["slow"] in (pid, "all")

    def decode(i):
        if slow:
            time.sleep(SLOW_S)
        return {"id": i}

    ds = (
        tpufeed.Dataset.from_sequence(list(range(4000)))
        .shard()
        .map(decode)
        .batch(4)
        .repeat()
        .options(pod_interval_s=INTERVAL_S)
    )
    server = tpufeed.serve_metrics(0) if pid == 0 else None
    it = iter(ds)
    (out / f"started-{pid}").write_text(str(time.time()))
    steps_after_kill = 0
    deadline = time.monotonic() + RUN_S
    while time.monotonic() < deadline:
        next(it)
        time.sleep(STEP_S)
        if pid == 0:
            if any("holds the step" in line for _, line in lines.lines):
                (out / "named").touch()
            if (out / "killed").exists():
                steps_after_kill += 1
            ended = "shared nothing" if spec["victim"] is not None else "input-bound"
            if any(ended in line for _, line in lines.lines):
                break
        elif (out / "stop").exists():
            break
    pod = tpufeed.pod_stats(timeout_s=10).to_dict()
    metrics = None
    if server is not None:
        from urllib.request import urlopen

        metrics = urlopen(server.url, timeout=10).read().decode()
        server.close()
    result = {"lines": lines.lines, "pod": pod, "metrics": metrics}
    result["steps_after_kill"] = steps_after_kill
    first_slow = 0 if spec["slow"] == "all" else spec["slow"]
    result["slow_started"] = float((out / f"started-{first_slow}").read_text())
    (out / f"result-{pid}.json").write_text(json.dumps(result))
    if pid == 0:
        (out / "stop").touch()
        others = [p for p in range(1, processes) if p != spec["victim"]]
        end = time.monotonic() + 30
        while time.monotonic() < end and not all(
            (out / f"result-{p}.json").exists() for p in others
        ):
            time.sleep(0.05)
    # no shutdown: jax.distributed's and torch's would wait for the killed process
    os._exit(0)


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    a = sys.argv[2:]
    try:
        _worker(int(a[0]), int(a[1]), Path(a[2]), json.loads(a[3]))
    except BaseException:  # noqa: BLE001 - said, then out at once (a shutdown would wait)
        import traceback

        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)
