"""Processes that a transform forks inside a worker: never workers themselves.

A transform may fork: `os.fork()`, `multiprocessing` with the fork start method, a library that
does. The child starts as a copy of the worker, with the worker's pipes to the iterator, its
shared-memory batch slots and beacon, and the chunk in flight. Were it to run on as a worker
(its function returned, or raised, into tpufeed's code), it would answer tasks that are not its
own and write into the slots of the worker's batch, or hold the worker's pipes open after the
worker ended: wrong data, or an iterator that waits forever.

So a worker registers an at-fork hook (`watch_forks`) that, in every child it forks:

- points the worker's pipes and beacon file at /dev/null: the child holds no end of them;
- maps the worker's shared memory (slots, beacon) privately in the child (zeroed): what the
  child writes there stays in the child;
- restores SIGTERM's default action (the worker's handler raises `WorkerStopped`, which a
  `multiprocessing` pool's `terminate()` would print as a traceback);
- has the kernel kill the child (SIGKILL) when the worker ends (PR_SET_PDEATHSIG): no child
  outlives its worker, and so none outlives the iterator. (Strictly, when the thread that
  forked it ends: transforms run on the worker's main thread, but a child forked from a
  thread the transform started ends with that thread.)

A child that comes back into tpufeed's code is ended there at once (`end_if_stray`), with the
exit status its function meant: `sys.exit(n)`'s n where its transform raised SystemExit, 1 for
another exception (its traceback printed, as Python prints one), 0 for a return. Processes that
a transform starts with `subprocess` (fork and exec, no `preexec_fn`) run no at-fork hook and
are left alone, so a process meant to outlive the worker is started that way.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import signal
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

from tpufeed.errors import TransformError
from tpufeed.ops.user_functions import end_forked_child_with

_PR_SET_PDEATHSIG = 1
_MAP_FIXED = 0x10
_stray: list[bool] = []  # set in a child of the worker (and in its own children)
_forker: list[int] = [0]  # the pid of the process that forks, noted just before it does


def watch_forks(fds: list[int], memory: Callable[[], list[mmap.mmap]]) -> None:
    """Makes every child this worker forks a stray (see the module's docstring): `fds`, the
    worker's pipes and beacon file; `memory()`, its shared mappings at the time of the fork."""

    def before() -> None:
        _forker[0] = os.getpid()

    def in_child() -> None:
        _stray.append(True)
        end_forked_child_with(end_if_stray)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in fds:
            os.dup2(devnull, fd)
        os.close(devnull)
        for segment in memory():
            _map_privately(segment)
        _die_with_parent(_forker[0])
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the forking thread is the child's main

    os.register_at_fork(before=before, after_in_child=in_child)


def end_if_stray(error: BaseException | None = None) -> None:
    """Ends this process here if a transform forked it in a worker (nothing otherwise): `error`
    is what its transform raised, None where it returned."""
    if _stray:
        _end(error)


def _end(error: BaseException | None) -> NoReturn:
    cause = error.__cause__ if isinstance(error, TransformError) else error
    code: object = 0
    if isinstance(cause, SystemExit):
        code = 0 if cause.code is None else cause.code
        if not isinstance(code, int):  # sys.exit("message"): printed, status 1
            print(code, file=sys.stderr)
            code = 1
    elif cause is not None:
        code = 1
        traceback.print_exception(type(cause), cause, cause.__traceback__)
    else:
        print(
            f"tpufeed: process {os.getpid()}, forked by a transform in a worker, returned into "
            "the worker's code and was ended (exit status 0); end a forked child with "
            "os._exit()",
            file=sys.stderr,
        )
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream: nothing to flush
            pass
    os._exit(code if isinstance(code, int) else 1)


def _map_privately(segment: mmap.mmap) -> None:
    """Replaces the pages of `segment` in this process by private zeroed ones at the same
    address (MAP_FIXED): the process's writes there no longer reach the other processes."""
    try:
        view = ctypes.c_char.from_buffer(segment)
    except (TypeError, ValueError):  # closed
        return
    address = ctypes.addressof(view)
    del view
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_FIXED
    libc.mmap(address, len(segment), mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)


def _die_with_parent(parent: int) -> None:
    """SIGKILL to this process when the thread that forked it ends (Linux; elsewhere nothing)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it ended before the request took hold
        os._exit(0)
