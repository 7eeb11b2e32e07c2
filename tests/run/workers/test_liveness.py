"""A stopped, killed or vanished worker (or fork server) is noticed and named, within a bound;
a slow one is waited for."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

import tpufeed
from tests.processes import wait_for_workers
from tpufeed.errors import InvalidArgumentError, WorkerError
from tpufeed.run.workers.forkserver import shared_server
from tpufeed.run.workers.liveness import StoppedClock, process_state

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("nothing_left_behind")]


def _tagged(i):
    """Each element says which process made it."""
    time.sleep(0.002)
    return {"pid": os.getpid(), "i": i}


def _running(options=None, isolate=True):
    """An iterator whose two workers have both made batches (so each holds chunks), and them."""
    ds = tpufeed.Dataset.from_sequence(list(range(100_000))).map(_tagged).batch(8)
    if options is not None:
        ds = ds.options(**options)
    it = ds.workers(2, isolate=isolate).iterator()
    makers = set()
    while len(makers) < 2:
        makers.add(int(next(it)["pid"][0]))
        makers.discard(os.getpid())  # a batch the parent made while workers started
    workers = [w for w in wait_for_workers(2) if w.pid in makers]
    assert len(workers) == 2
    return it, workers


def test_process_state_tells_stopped_from_running():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert process_state(proc.pid) in ("R", "S")
        proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while process_state(proc.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process_state(proc.pid) == "T"
    finally:
        proc.kill()
        proc.wait()
    assert process_state(proc.pid) == ""


def test_a_process_held_by_a_debugger_is_not_counted_as_stopped():
    """A tracing stop (`t`: gdb, py-spy attached) is the debugger's business, not a fault."""
    import ctypes

    from tpufeed.run.workers.liveness import is_stopped

    libc = ctypes.CDLL(None, use_errno=True)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        if libc.ptrace(16, proc.pid, None, None) != 0:  # PTRACE_ATTACH: stops it, traced
            pytest.skip(f"ptrace not permitted here (errno {ctypes.get_errno()})")
        os.waitpid(proc.pid, 0)
        assert process_state(proc.pid) == "t" and not is_stopped(proc.pid)
        libc.ptrace(17, proc.pid, None, None)  # PTRACE_DETACH
    finally:
        proc.kill()
        proc.wait()


def test_stopped_clock_counts_only_looks_close_together():
    clock = StoppedClock()
    assert clock.look([1]) == {1: 0.0}
    time.sleep(0.05)
    assert clock.look([1, 2])[1] > 0.0
    assert clock.look([2]).keys() == {2}  # 1 continued: forgotten
    clock.forget()
    time.sleep(1.2)  # a gap longer than a look's step counts at most one step
    clock.look([3])
    time.sleep(1.2)
    assert clock.look([3])[3] <= 1.0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("isolate", [True, False])
def test_a_stopped_worker_is_named_with_what_it_was_making(isolate):
    it, workers = _running({"stopped_s": 1}, isolate)
    victim = workers[0]
    victim.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(WorkerError) as caught:
            for _ in it:
                pass
    finally:
        it.close()
    message = str(caught.value)
    assert f"pid {victim.pid}) has been stopped" in message
    assert "records" in message and "kill -CONT" in message and "stopped_s" in message


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_stopped_worker_is_named_by_default():
    it, workers = _running()
    workers[1].send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(WorkerError, match=f"pid {workers[1].pid}.*stopped_s=.*now 10 s"):
            for _ in it:
                pass
    finally:
        it.close()


@pytest.mark.timeout(60)
def test_a_worker_continued_within_stopped_s_is_waited_for():
    it, workers = _running({"stopped_s": 30})
    workers[0].send_signal(signal.SIGSTOP)
    time.sleep(1.5)
    workers[0].send_signal(signal.SIGCONT)
    for _, batch in zip(range(200), it):
        assert len(batch["i"]) == 8
    it.close()


@pytest.mark.timeout(60)
def test_a_slow_transform_is_not_a_stopped_worker():
    def slow_once(i):
        if i == 20:
            time.sleep(3)  # three times stopped_s, running
        return i

    ds = tpufeed.Dataset.from_sequence(list(range(200))).map(slow_once).batch(10)
    assert len(list(ds.options(stopped_s=1).workers(2, isolate=True))) == 20


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_stopping_the_whole_process_group_is_not_a_stopped_worker(tmp_path):
    """Ctrl-Z stops the parent with its workers; after `fg` the run goes on."""
    script = tmp_path / "loop.py"
    script.write_text(
        textwrap.dedent("""
        import time, tpufeed
        ds = (tpufeed.Dataset.from_sequence(list(range(3000)))
              .map(lambda i: (time.sleep(0.002), i)[1]).batch(8)
              .options(stopped_s=1).workers(2, isolate=True))
        for n, b in enumerate(ds):
            if n == 5:
                print("running", flush=True)
        print("done", n + 1, flush=True)
    """)
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout.readline().strip() == "running"
        os.killpg(proc.pid, signal.SIGSTOP)
        time.sleep(3)
        os.killpg(proc.pid, signal.SIGCONT)
        assert proc.stdout.readline().split() == ["done", "375"]
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()


def _dies_in_chunk_20(i):
    """Chunk 20 (records 200..209, batches of 10) is slow to make, then its worker dies in it:
    by then the iterator waits for that very chunk, and has sent the worker another."""
    if i == 200:
        time.sleep(1.0)
    if i == 205:
        os.kill(os.getpid(), signal.SIGKILL)
    return i


@pytest.mark.timeout(60)
def test_a_worker_that_dies_is_named_with_the_chunk_it_was_making_not_the_next_it_was_sent():
    ds = tpufeed.Dataset.from_sequence(list(range(1000))).map(_dies_in_chunk_20).batch(10)
    it = ds.workers(2, isolate=True).iterator()
    with pytest.raises(WorkerError, match="was killed by signal 9") as caught:
        for _ in it:
            pass
    it.close()
    assert "while making the chunk of records 200..209 (the first: record 200)" in str(caught.value)


@pytest.mark.timeout(60)
def test_a_killed_worker_is_named_with_what_it_was_making():
    it, workers = _running()
    workers[0].send_signal(signal.SIGKILL)
    with pytest.raises(WorkerError) as caught:
        for _ in it:
            pass
    it.close()
    assert f"pid {workers[0].pid}) was killed by signal 9 while making" in str(caught.value)


def _close_every_fd_at(i, parent):
    if i == 400 and os.getpid() != parent:
        os.closerange(3, 1 << 16)
        time.sleep(60)
    return i


@pytest.mark.timeout(60)
def test_a_worker_that_closes_its_pipe_is_named():
    parent = os.getpid()
    ds = tpufeed.Dataset.from_sequence(list(range(1000))).map(
        lambda i: _close_every_fd_at(i, parent)
    )
    it = ds.batch(10).workers(2, isolate=True).iterator()
    with pytest.raises(WorkerError, match="closed its pipe to this process while still running"):
        for _ in it:
            pass
    it.close()


@pytest.mark.timeout(60)
def test_a_worker_reaped_by_someone_else_is_named(monkeypatch):
    monkeypatch.setenv("TPUFEED_FORKSERVER", "0")  # workers are this process's own children
    it, workers = _running()
    victim = workers[0]
    victim.send_signal(signal.SIGKILL)
    os.waitpid(victim.pid, 0)  # the user's code takes the status before tpufeed can
    with pytest.raises(WorkerError, match=f"pid {victim.pid}.*another wait in this process"):
        for _ in it:
            pass
    it.close()


def _server_process():
    server = shared_server()
    assert server is not None
    return server.proc


@pytest.mark.timeout(60)
def test_workers_whose_fork_server_died_before_forking_them_are_named():
    server = _server_process()
    server.send_signal(signal.SIGSTOP)  # it takes the requests, and forks nothing
    ds = tpufeed.Dataset.from_sequence(list(range(100))).batch(10).workers(2, isolate=True)
    it = ds.iterator()
    server.send_signal(signal.SIGKILL)
    server.wait()
    with pytest.raises(WorkerError, match=f"never started: .*fork server \\(pid {server.pid}\\)"):
        next(it)
    it.close()
    assert len(list(ds)) == 10  # the next iterator starts a new server


@pytest.mark.timeout(60)
def test_a_stopped_fork_server_is_named_within_stopped_s():
    server = _server_process()
    server.send_signal(signal.SIGSTOP)
    ds = tpufeed.Dataset.from_sequence(list(range(100))).batch(10)
    it = ds.options(stopped_s=1).workers(2, isolate=True).iterator()
    try:
        with pytest.raises(
            WorkerError, match=f"fork server \\(pid {server.pid}\\) has been stopped"
        ):
            next(it)
    finally:
        it.close()
        server.kill()
        server.wait()
    assert not psutil.pid_exists(server.pid) or psutil.Process(server.pid).status() == "zombie"


@pytest.mark.timeout(60)
def test_a_run_whose_fork_server_and_workers_are_all_stopped_is_named_within_stopped_s():
    """Nothing of the run answers: the error comes after stopped_s of waiting (+ a look), the
    iterator closes at once (its killed workers are zombies the stopped server cannot reap), and
    the next iterator starts a new server."""
    it, workers = _running({"stopped_s": 1})
    server = _server_process()
    assert {worker.ppid() for worker in workers} == {server.pid}
    server.send_signal(signal.SIGSTOP)
    for worker in workers:
        worker.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(WorkerError, match="has been stopped .* for 1 s while making") as caught:
            for _ in it:
                pass
        it.close()
        assert f"Its fork server (pid {server.pid}) is stopped too" in str(caught.value)
        ds = tpufeed.Dataset.from_sequence(list(range(100))).batch(10)
        assert len(list(ds.workers(2, isolate=True))) == 10  # on a new server
        assert _server_process().pid != server.pid
    finally:
        server.kill()
        server.wait()


def test_stopped_s_must_be_a_positive_number_or_none():
    ds = tpufeed.Dataset.from_sequence([1])
    for bad in (0, -1, "10", True):
        with pytest.raises(InvalidArgumentError, match="stopped_s must be a positive number"):
            ds.options(stopped_s=bad)
    assert list(ds.options(stopped_s=None)) == [1]


@pytest.mark.timeout(60)
def test_a_mixture_passes_stopped_s_to_its_components_workers():
    a, b = (tpufeed.Dataset.from_sequence(list(range(k, k + 50_000))).map(_tagged) for k in (0, 1))
    mixed = tpufeed.Dataset.mix([a.workers(1), b.workers(1)], weights=[0.5, 0.5], seed=0)
    it = mixed.batch(8).options(stopped_s=1).iterator()
    makers = set()
    while len(makers) < 2:
        makers |= {int(p) for p in next(it)["pid"]} - {os.getpid()}
    for worker in wait_for_workers(2):
        worker.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(WorkerError, match="has been stopped .* for 1 s"):
            for _ in it:
                pass
    finally:
        it.close()
