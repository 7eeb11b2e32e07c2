"""A transform that forks inside a worker: the child never acts as the worker, the run's output
stays exact, nothing hangs, and no child outlives its worker."""

import os
import subprocess
import sys
import textwrap
import time
from functools import partial

import psutil
import pytest

import tpufeed

pytestmark = [pytest.mark.multiprocess, pytest.mark.usefixtures("nothing_left_behind")]

_EVERY = 25  # a record of every 25 forks


def _fork_at(i, child, folder):
    """Forks on every `_EVERY`th record; `child(i)` runs in the child (its pid noted in
    `folder`). The worker waits for it unless it lingers; it returns what the child's exit
    status was, so the output says what the child did."""
    if i % _EVERY != 7:
        return i
    pid = os.fork()
    if pid == 0:
        return child(i)  # what happens next is the case under test
    (folder / str(pid)).touch()
    if child is _lingers:
        return i
    return 1000 + os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _exits(i):
    sys.exit(0)


def _exits_with_3(i):
    sys.exit(3)


def _leaves_at_once(i):
    os._exit(0)


def _returns(i):
    return -i  # back into the worker's code, with another value than the worker's


def _raises(i):
    raise ValueError(f"the child of record {i} fails")


def _lingers(i):
    time.sleep(60)
    os._exit(0)


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "child, status",
    [
        (_exits, 0),
        (_exits_with_3, 3),
        (_leaves_at_once, 0),
        (_returns, 0),
        (_raises, 1),
        (_lingers, None),
    ],
)
def test_a_child_forked_by_a_transform_never_acts_as_the_worker(tmp_path, child, status):
    n = 300
    ds = tpufeed.Dataset.from_sequence(list(range(n))).map(
        partial(_fork_at, child=child, folder=tmp_path)
    )
    it = ds.batch(10).workers(2, isolate=True).iterator()
    out = [int(x) for batch in it for x in batch]
    it.close()
    forked = [i for i in range(n) if i % _EVERY == 7]
    expected = [i if i not in forked or status is None else 1000 + status for i in range(n)]
    assert out == expected
    children = [int(name) for name in os.listdir(tmp_path)]
    assert len(children) == len(forked)
    deadline = time.monotonic() + 10  # a lingering child ends with its worker
    while any(_running(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in children if _running(pid)] == []


def _running(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_fork_pool_inside_a_transform_runs_exact_and_quiet(tmp_path):
    """`multiprocessing` with the fork start method, a common pattern in a transform: exact,
    nothing printed (its pool's terminate() is SIGTERM, which a worker's own handler would turn
    into a traceback in each child), and no process left once the run ends."""
    (tmp_path / "pooled.py").write_text(
        textwrap.dedent("""
        import multiprocessing

        def square(x):
            return x * x

        def with_a_pool(i):
            if i % 50 == 7:
                with multiprocessing.get_context("fork").Pool(2) as pool:
                    assert pool.map(square, range(4)) == [0, 1, 4, 9]
            return i
    """)
    )
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent("""
        import tpufeed
        from pooled import with_a_pool

        ds = tpufeed.Dataset.from_sequence(list(range(400))).map(with_a_pool).batch(10)
        out = [int(x) for b in ds.workers(2, isolate=True) for x in b]
        print("exact" if out == list(range(400)) else f"wrong: {out}")
    """)
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its session: every process it leads to, found after it ends
    )
    try:
        out, err = proc.communicate(timeout=100)
        time.sleep(0.5)
        left = [p.pid for p in psutil.process_iter() if _session(p.pid) == proc.pid]
    finally:
        proc.kill()
    assert (proc.returncode, out, err) == (0, "exact\n", "")
    assert left == []


def _session(pid):
    try:
        return os.getsid(pid) if _running(pid) else None
    except OSError:  # gone since it was listed
        return None
