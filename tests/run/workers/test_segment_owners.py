"""Shared-memory segments carry their owner (pid, start time, pid namespace); the next run
removes those of a job killed whole, and never a live process's."""

import glob
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tpufeed.run.workers.liveness import start_time
from tpufeed.run.workers.segment_owners import owner_tag, remove_orphans


def _ended_process():
    """(pid, start time) of a process that has ended and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    started = start_time(proc.pid)
    proc.kill()
    proc.wait()
    return proc.pid, started


def test_segments_are_named_by_their_owner():
    namespace = os.stat("/proc/self/ns/pid").st_ino
    assert owner_tag() == f"tpufeed-{os.getpid()}-{start_time(os.getpid())}-{namespace}"


@pytest.mark.multiprocess
def test_the_sweep_removes_the_segments_of_owners_gone_and_only_those(tmp_path):
    pid, started = _ended_process()
    namespace = os.stat("/proc/self/ns/pid").st_ino
    mine = f"{owner_tag()}-abcd1234-w0-0"
    names = {
        "dead": f"tpufeed-{pid}-{started}-{namespace}-abcd1234-w0-0",
        "reused": f"tpufeed-{os.getpid()}-{start_time(os.getpid()) + 1}-{namespace}-ab-w1-0",
        "mine": mine,
        "elsewhere": f"tpufeed-{pid}-{started}-{namespace + 1}-abcd1234-w0-0",  # another pid ns
        "older": f"tpufeed-{pid}-abcd1234-w0-0",  # no start time: not judged
        "other": "someone-else's",
    }
    for name in names.values():
        (tmp_path / name).write_bytes(b"x")
    removed = remove_orphans(str(tmp_path))
    assert sorted(removed) == sorted(str(tmp_path / names[k]) for k in ("dead", "reused"))
    left = {names[k] for k in ("mine", "elsewhere", "older", "other")}
    assert set(os.listdir(tmp_path)) == left


_JOB = """
    import sys, numpy as np, tpufeed
    ds = (tpufeed.Dataset.from_sequence(list(range(10_000)))
          .map(lambda i: {"x": np.full(100_000, i % 256, np.uint8)}).batch(4))
    it = ds.workers(2, isolate=True).iterator()
    next(it)
    print("running", flush=True)
    sys.stdin.readline()  # holds the iterator while its workers fill their slots
    it.close()
    print("closed", flush=True)
"""


def _job(tmp_path, name):
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(_JOB))
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a group of its own: its fork server and workers with it
    )
    assert proc.stdout.readline() == "running\n"
    return proc


def _segments(pid):
    return glob.glob(f"/dev/shm/tpufeed-{pid}-*")


def _wait_for_segments(pid):
    """The segments a job's workers have made and its iterator has not mapped, once they stop
    changing (its workers have filled their slots)."""
    deadline = time.monotonic() + 30
    seen: list[str] = []
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = sorted(_segments(pid))
        if now and now == seen:
            break
        seen = now
    return set(seen)


@pytest.mark.multiprocess
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_next_run_removes_a_killed_jobs_segments_and_keeps_a_live_ones(tmp_path):
    killed, live = _job(tmp_path, "killed"), _job(tmp_path, "live")
    try:
        live_segments = _wait_for_segments(live.pid)
        assert _wait_for_segments(killed.pid) and live_segments
        os.killpg(killed.pid, signal.SIGKILL)  # the job whole: iterator, fork server, workers
        killed.wait()
        time.sleep(0.5)
        assert _segments(killed.pid)  # nobody was left to remove them
        next_run = subprocess.run(
            [
                sys.executable,
                "-c",
                "import tpufeed; ds = tpufeed.Dataset.from_sequence([1, 2]).batch(2); "
                "print(len(list(ds.workers(1, isolate=True))))",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert next_run.stdout == "1\n", next_run.stderr
        assert _segments(killed.pid) == []  # gone before the next run's first worker started
        assert set(_segments(live.pid)) == live_segments  # a live iterator's are its own
        live.stdin.write("\n")
        live.stdin.flush()
        assert live.stdout.readline() == "closed\n"
        assert live.wait(timeout=60) == 0
        assert _segments(live.pid) == []
    finally:
        for job in (killed, live):
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()
            for path in _segments(job.pid):  # never left behind by a failing test either
                os.unlink(path)
