"""Stopping a pipeline: Ctrl-C, close() and exit never wait for a slow transform."""

import signal
import subprocess
import sys
import textwrap
import time

import pytest

import tpufeed


def test_close_does_not_wait_for_a_slow_transform_on_the_prefetch_thread():
    it = tpufeed.Dataset.from_sequence(list(range(10))).map(
        lambda i: time.sleep(30)).prefetch(2).iterator()
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
def test_ctrl_c_stops_a_pipeline_whose_prefetch_thread_is_in_a_slow_transform(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent("""
        import time, tpufeed
        it = tpufeed.Dataset.from_sequence(list(range(100))).map(
            lambda i: time.sleep(120)).prefetch(2).iterator()
        print("running", flush=True)
        next(it)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
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
