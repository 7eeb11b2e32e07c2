"""Telling tpufeed's worker processes apart in tests: fresh interpreters or forked by the fork
server (named `tpufeed-worker`); the fork server itself (`tpufeed-forksrv`) outlives iterators
by design and is never a leftover."""

import psutil

WORKER_NAME = "tpufeed-worker"
SERVER_NAME = "tpufeed-forksrv"


def is_worker(proc):
    """Also a worker the fork server has just forked, before it has taken its own name."""
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        if proc.name() == WORKER_NAME or "tpufeed.run.workers.worker" in " ".join(proc.cmdline()):
            return True
        parent = proc.parent()
        return parent is not None and is_fork_server(parent)
    except psutil.NoSuchProcess:
        return False


def is_fork_server(proc):
    """Also a fork server still starting, before it has taken its own name."""
    try:
        return proc.name() == SERVER_NAME or "tpufeed.run.workers.forkserver" in " ".join(
            proc.cmdline()
        )
    except psutil.NoSuchProcess:
        return False


def worker_processes(parent=None):
    """The live tpufeed workers among `parent`'s descendants (default: this process's)."""
    return [c for c in psutil.Process(parent).children(recursive=True) if is_worker(c)]


def wait_for_workers(count, parent=None, timeout_s=10.0):
    """The live workers once there are `count` of them (the fork server forks them as it gets
    to it, so a loaded machine may deliver the first batches before they exist)."""
    import time

    deadline = time.monotonic() + timeout_s
    while len(worker_processes(parent)) < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return worker_processes(parent)


def default_ctrl_c():
    """`preexec_fn` for a child that a test interrupts: Ctrl-C back to its default. A shell
    starts background jobs with SIGINT ignored (`pytest ... &`), children inherit that, and
    Python then installs no KeyboardInterrupt handler."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def leftovers():
    """(pids of live tpufeed workers, /dev/shm segments) that this process still has."""
    import glob
    import os

    segments = glob.glob(f"/dev/shm/tpufeed-{os.getpid()}-*")
    return [c.pid for c in worker_processes()], segments
