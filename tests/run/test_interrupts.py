"""Stopping a pipeline: Ctrl-C, close() and exit never wait for a slow transform."""

import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tpufeed
from tests.processes import default_ctrl_c, wait_for_workers, worker_processes


def test_close_does_not_wait_for_a_slow_transform_on_the_prefetch_thread():
    it = (
        tpufeed.Dataset.from_sequence(list(range(10)))
        .map(lambda i: time.sleep(30))
        .prefetch(2)
        .iterator()
    )
    time.sleep(0.3)  # the thread is inside the first call
    started = time.monotonic()
    it.close()
    assert time.monotonic() - started < 3
    with pytest.raises(StopIteration):
        next(it)


def test_a_pure_python_transform_stops_when_the_iterator_closes():
    """A thread left inside a Python loop gets PrefetchStopped and ends soon after close()."""
    import threading

    def spin(i):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pass
        return i

    before = threading.active_count()
    it = tpufeed.Dataset.from_sequence(list(range(5))).map(spin).prefetch(1).iterator()
    time.sleep(0.3)
    it.close()
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() == before


@pytest.mark.multiprocess
def _start_loop(tmp_path, code: str) -> subprocess.Popen:
    """`code` run as a script in a process that Ctrl-C (SIGINT) interrupts as a terminal does."""
    script = tmp_path / "loop.py"
    script.write_text(code)
    return subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_ctrl_c,
    )


def test_ctrl_c_stops_a_pipeline_whose_prefetch_thread_is_in_a_slow_transform(tmp_path):
    proc = _start_loop(
        tmp_path,
        textwrap.dedent("""
        import time, tpufeed
        it = tpufeed.Dataset.from_sequence(list(range(100))).map(
            lambda i: time.sleep(120)).prefetch(2).iterator()
        print("running", flush=True)
        next(it)
    """),
    )
    try:
        assert proc.stdout.readline().strip() == "running"
        time.sleep(0.5)  # the consumer waits, the prefetch thread sleeps in the transform
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
        assert time.monotonic() - started < 10
        assert "KeyboardInterrupt" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.multiprocess
def test_ctrl_c_inside_a_transform_in_the_calling_thread_stops_the_iterator(tmp_path):
    """A transform's BaseExceptions are TransformErrors, but not Ctrl-C in the calling process's
    main thread: it stops the iterator, and its traceback says which stage it came in."""
    proc = _start_loop(
        tmp_path,
        textwrap.dedent("""
        import time, tpufeed
        def slow(i):
            if i == 3:
                print("running", flush=True)
                time.sleep(120)
            return i
        try:
            list(tpufeed.Dataset.from_sequence(list(range(100))).map(slow))
        except tpufeed.TpufeedError as error:
            print("swallowed", type(error).__name__, flush=True)
    """),
    )
    try:
        assert proc.stdout.readline().strip() == "running"
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
        stdout, stderr = proc.stdout.read(), proc.stderr.read()
        assert proc.returncode != 0 and "swallowed" not in stdout, stdout
        assert stderr.rstrip().endswith("(tpufeed: it came while map(slow) ran)"), stderr
        assert "KeyboardInterrupt" in stderr
    finally:
        proc.kill()
        proc.wait()


def hang_on_17(i):
    if i == 17:
        time.sleep(60)
    return i


@pytest.mark.multiprocess
@pytest.mark.parametrize("workers", [0, 2])
def test_a_timeout_names_the_stage_and_the_record_and_stops_the_workers(workers):

    ds = (
        tpufeed.Dataset.from_sequence(list(range(40)))
        .map(lambda i: i + 0)
        .map(hang_on_17)
        .batch(4)
        .workers(workers)
        .options(timeout_s=2)
    )
    it = ds.iterator()
    got = []
    started = time.monotonic()
    with pytest.raises(tpufeed.InputTimeoutError) as info:
        for batch in it:
            got.append(batch.tolist())
    assert 2 <= time.monotonic() - started < 20
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    error = info.value
    assert (error.stage, error.record) == ("map(hang_on_17)", 17)
    assert "in map(hang_on_17) on record 17" in str(error) and "timeout_s=2" in str(error)
    fixed = tpufeed.Dataset.from_sequence(list(range(40))).map(lambda i: i + 0).map(int).batch(4)
    assert [b.tolist() for b in fixed.iterator(it.get_state())][0] == [16, 17, 18, 19]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and worker_processes():
        time.sleep(0.1)
    assert not worker_processes()
    it.close()


@pytest.mark.multiprocess
def test_a_stopped_worker_is_caught_by_the_timeout():

    ds = (
        tpufeed.Dataset.from_sequence(list(range(100_000)))
        .map(lambda i: i * 2)
        .batch(8)
        .workers(1)
        .options(timeout_s=2)
    )
    it = ds.iterator()
    next(it)
    worker = wait_for_workers(1)[0]
    worker.suspend()
    try:
        with pytest.raises(tpufeed.InputTimeoutError, match=f"worker 0 \\(pid {worker.pid}\\)"):
            for _ in it:
                pass
    finally:
        if worker.is_running():
            worker.resume()
    it.close()


def test_a_timeout_that_does_not_fire_changes_nothing():
    ds = tpufeed.Dataset.from_sequence(list(range(50))).shuffle(3).map(lambda i: i * 3).batch(7)
    expected = [b.tolist() for b in ds]
    assert [b.tolist() for b in ds.options(timeout_s=30)] == expected
    assert [b.tolist() for b in ds.workers(2).options(timeout_s=30)] == expected


@pytest.mark.parametrize("bad", [0, -1, True, "5"])
def test_a_bad_timeout_is_refused(bad):
    with pytest.raises(tpufeed.InvalidArgumentError, match="timeout_s"):
        tpufeed.Dataset.from_sequence([1]).options(timeout_s=bad)


@pytest.mark.multiprocess
@pytest.mark.parametrize("isolate", [False, True])
def test_a_native_crash_in_a_transform_spares_the_caller_only_when_isolated(tmp_path, isolate):
    """README: while workers start, the first chunks run in the caller; isolate=True runs none."""
    script = tmp_path / "crash.py"
    script.write_text(
        textwrap.dedent(f"""
        import ctypes, tpufeed
        def crash(i):
            if i == 0:
                ctypes.string_at(0)  # a segfault, as a broken native decoder would cause
            return i
        ds = tpufeed.Dataset.from_sequence(list(range(100))).map(crash).batch(4)
        try:
            list(ds.workers(2, isolate={isolate}))
        except tpufeed.WorkerError as error:
            print("caught", error)
    """)
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    if isolate:
        assert proc.returncode == 0, proc.stderr
        assert "caught tpufeed worker" in proc.stdout and "signal 11" in proc.stdout
    else:
        assert proc.returncode == -signal.SIGSEGV


def test_isolate_refuses_auto_workers_whose_warm_up_runs_in_the_caller():
    ds = tpufeed.Dataset.from_sequence([1, 2])
    with pytest.raises(tpufeed.InvalidArgumentError, match="isolate=True give a number"):
        ds.workers("auto", isolate=True)


@pytest.mark.parametrize("auto", ["workers", "prefetch"])
def test_a_timeout_watches_the_auto_warm_up_too(auto):
    def hang_on_1(i):
        if i == 1:
            time.sleep(60)
        return i

    ds = tpufeed.Dataset.from_sequence(list(range(20))).map(lambda i: i).map(hang_on_1).batch(4)
    ds = (ds.workers("auto") if auto == "workers" else ds.prefetch("auto")).options(timeout_s=2)
    started = time.monotonic()
    with pytest.raises(
        tpufeed.InputTimeoutError,
        match=r"warm-up has been in map\(hang_on_1\) "
        r"on record 1 ",
    ):
        list(ds)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("setting", ["plain", "prefetch", "workers"])
def test_threads_sharing_one_iterator_each_get_whole_items_and_all_end(setting):
    import threading

    ds = tpufeed.Dataset.from_sequence(list(range(400))).map(lambda i: i * 2)
    ds = {"plain": ds, "prefetch": ds.prefetch(2), "workers": ds.batch(4).workers(2)}[setting]
    it = ds.iterator()
    got: list = []
    errors: list = []

    def consume():
        try:
            for item in it:
                got.append(item)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=consume) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and not errors
    values = sorted(int(v) for item in got for v in np.atleast_1d(item))
    assert values == [2 * i for i in range(400)]


@pytest.mark.multiprocess
def test_a_timeout_covers_workers_that_never_start(tmp_path):
    """A function whose module blocks on import in the workers: no worker ever starts."""
    (tmp_path / "blocks_on_import.py").write_text(
        textwrap.dedent("""
        import os, time
        if os.environ.get("TPUFEED_TEST_PARENT") != str(os.getpid()):
            time.sleep(60)  # in a worker: never gets going
        def double(i):
            return 2 * i
    """)
    )
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(f"""
        import os, sys, time
        os.environ["TPUFEED_TEST_PARENT"] = str(os.getpid())
        sys.path.insert(0, {str(tmp_path)!r})
        import tpufeed, blocks_on_import
        ds = (tpufeed.Dataset.from_sequence(list(range(8))).map(blocks_on_import.double)
              .workers(1).options(timeout_s=2))
        started = time.monotonic()
        try:
            list(ds)
        except tpufeed.InputTimeoutError as error:
            print(round(time.monotonic() - started), error)
    """)
    )
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert "none of 1 worker(s)" in proc.stdout and "started" in proc.stdout, proc.stderr[-2000:]
    assert int(proc.stdout.split()[0]) < 10
