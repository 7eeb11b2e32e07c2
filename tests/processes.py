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
        if proc.name() == WORKER_NAME or "tpufeed.workers.worker" in " ".join(proc.cmdline()):
            return True
        parent = proc.parent()
        return parent is not None and is_fork_server(parent)
    except psutil.NoSuchProcess:
        return False


def is_fork_server(proc):
    try:
        return proc.name() == SERVER_NAME
    except psutil.NoSuchProcess:
        return False


def worker_processes(parent=None):
    """The live tpufeed workers among `parent`'s descendants (default: this process's)."""
    return [c for c in psutil.Process(parent).children(recursive=True) if is_worker(c)]
