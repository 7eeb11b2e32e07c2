"""The worker pool never leaves a process or a shared-memory segment behind: not when a worker is
killed, the iterator is closed or collected, the script gets Ctrl-C, or its process is killed."""

import gc
import glob
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import psutil
import pytest

import tpufeed
from tests.processes import default_ctrl_c, is_fork_server, leftovers, wait_for_workers
from tpufeed.errors import WorkerError

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("nothing_left_behind")]


@pytest.mark.timeout(60)
def test_a_killed_worker_surfaces_as_an_error_quickly():
    """The pipeline never ends (repeat()), so only the killed worker's error ends the loop; the
    test's timeout is the bound."""
    ds = tpufeed.Dataset.from_sequence(list(range(1_000))).map(lambda i: (time.sleep(0.01), i)[1])
    it = ds.batch(8).repeat().workers(2).iterator()
    next(it)
    victim = wait_for_workers(1)[0]
    victim.send_signal(signal.SIGKILL)
    with pytest.raises(WorkerError, match=f"pid {victim.pid}.*signal 9"):
        for _ in it:
            pass
    it.close()


def test_close_and_garbage_collection_stop_the_workers():
    ds = (
        tpufeed.Dataset.from_sequence(list(range(500)))
        .map(lambda i: {"x": np.arange(4) * i})
        .batch(7)
        .repeat()
        .workers(2)
    )
    it = ds.iterator()
    try:
        next(it)
        assert len(wait_for_workers(2)) == 2
    finally:
        it.close()
    it.close()
    assert leftovers()[0] == []
    it = ds.iterator()
    next(it)
    del it
    gc.collect()


def test_ctrl_c_leaves_no_worker_and_no_shared_memory(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(
        textwrap.dedent("""
        import time, tpufeed, numpy as np
        ds = (tpufeed.Dataset.from_sequence(list(range(10**6)))
              .map(lambda i: np.full(1000, i, np.int32)).batch(64).workers(2))
        for i, b in enumerate(ds):
            if i == 2:
                print("running", flush=True)
    """)
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, preexec_fn=default_ctrl_c
    )
    assert proc.stdout.readline().strip() == "running"
    workers = wait_for_workers(2, proc.pid)
    assert len(workers) == 2
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=10)
    psutil.wait_procs(workers, timeout=5)
    assert not any(w.is_running() and w.status() != psutil.STATUS_ZOMBIE for w in workers)
    assert glob.glob(f"/dev/shm/tpufeed-{proc.pid}-*") == []


def test_a_sigterm_that_lands_in_a_finalizer_ends_the_worker_without_a_traceback(tmp_path):
    """Python swallows an exception raised in a `__del__` and prints "Exception ignored": a
    SIGTERM that lands there must still end the worker (before its next task), quietly."""
    script = tmp_path / "finalizer.py"
    script.write_text(
        textwrap.dedent("""
        import os, signal, tpufeed
        class Stopped:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM)  # lands while the finalizer runs
        def fn(i):
            if i == 0:
                Stopped()
            return i
        ds = tpufeed.Dataset.from_sequence(list(range(64))).map(fn).batch(4)
        try:
            for batch in ds.workers(1, isolate=True):
                pass
        except tpufeed.errors.WorkerError as error:
            print("ended:", error)
    """)
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert "exited without being asked to" in done.stdout, done.stdout + done.stderr
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_parent_killed_takes_its_workers_along(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(
        textwrap.dedent("""
        import tpufeed, numpy as np
        ds = tpufeed.Dataset.from_sequence(list(range(10**6))).map(lambda i: np.full(10, i)).batch(8).workers(2)
        for i, b in enumerate(ds):
            if i == 2:
                print("running", flush=True)
    """)
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "running"
    workers = wait_for_workers(2, proc.pid, timeout_s=20)
    servers = [c for c in psutil.Process(proc.pid).children() if is_fork_server(c)]
    assert len(workers) == 2 and len(servers) == 1
    proc.kill()
    proc.wait()
    gone, alive = psutil.wait_procs(workers + servers, timeout=5)
    assert not alive
    assert glob.glob(f"/dev/shm/tpufeed-{proc.pid}-*") == []


def test_a_worker_stopped_by_sigterm_inside_a_transform_is_not_the_transforms_failure():
    """SIGTERM (how a worker whose parent is gone is stopped) lands inside the transform; a
    transform's BaseExceptions are TransformErrors, but this one ends the worker cleanly."""
    ds = (
        tpufeed.Dataset.from_sequence(list(range(100)))
        .map(lambda i: time.sleep(60))
        .batch(4)
        .workers(1, isolate=True)
    )
    it = ds.iterator()
    try:
        worker = wait_for_workers(1)[0]
        time.sleep(1.0)  # inside time.sleep in the transform
        worker.send_signal(signal.SIGTERM)
        ended = f"pid {worker.pid}\\) exited without being asked to \\(exit status 0"
        with pytest.raises(WorkerError, match=ended):
            next(it)
    finally:
        it.close()


def test_a_worker_that_ends_after_its_answer_is_named_not_its_missing_shared_memory(tmp_path):
    """A SIGTERM after a worker sent a batch: the worker removes the batch's shared-memory file as
    it ends, before this process maps it (CI met this race once): the error is the worker's end,
    not a FileNotFoundError from /dev/shm."""
    script = tmp_path / "ends.py"
    script.write_text(
        textwrap.dedent("""
        import os, signal, time, numpy as np, tpufeed
        def fn(i):
            if i == 4:  # the second batch's first record: the worker ends once it is sent
                os.kill(os.getpid(), signal.SIGTERM)
            return np.full(1000, i)
        ds = tpufeed.Dataset.from_sequence(list(range(64))).map(fn).batch(4)
        it = ds.workers(1, isolate=True).iterator()
        try:
            next(it)
            time.sleep(2)  # the second batch is sent and the worker gone before it is mapped
            for batch in it:
                pass
        except tpufeed.errors.WorkerError as error:
            print("ended:", error)
    """)
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert "exited without being asked to" in done.stdout, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def test_a_batch_whose_shared_memory_someone_else_removed_is_named():
    """A cleanup job that empties /dev/shm under a live worker: the batch is lost, and the error
    says so and names the file, instead of a bare FileNotFoundError."""
    ds = tpufeed.Dataset.from_sequence(list(range(400))).map(lambda i: np.full(1000, i)).batch(4)
    it = ds.workers(1, isolate=True).prefetch(4).iterator()
    try:
        next(it)
        time.sleep(2)  # the worker fills its other slots, each in a segment not mapped yet
        import os

        for path in glob.glob(f"/dev/shm/tpufeed-{os.getpid()}-*"):
            os.unlink(path)
        with pytest.raises(WorkerError, match="shared-memory file /dev/shm/tpufeed-.* was removed"):
            for _ in it:
                pass
    finally:
        it.close()
