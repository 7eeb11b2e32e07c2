"""`workers(n, init=fn)`: a function every process that makes elements calls once, before its
first element, as Grain's `worker_init_fn(worker_index, worker_count)`.

Each worker process calls `fn(index, count)`, its index 0..count-1 among the run's `count`
workers, before it says it is ready: a worker started anew (the next iterator's, one that
replaces a killed worker's run) calls it again. The calling process makes elements too where
it must: every chunk with `workers(0)`, the first chunks while workers start (none with
`isolate=True`), the `workers("auto")` warm-up, the records a restored `pack` reads again. It
calls `fn(-1, count)` (-1: not a worker; `count` 0 with no workers or before "auto" chooses)
once, before the first of them: once per process and function, however many iterators it
makes. What `fn` raises is a `WorkerError` naming it, the process and the cause, with its
traceback.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import Any

from tpufeed.errors import InvalidArgumentError, WorkerError

__all__ = ["CALLER", "NO_MIXTURE_INIT", "WorkerInit", "check_init", "init_here", "run_init"]

CALLER = -1  # the index the calling process is called with
NO_MIXTURE_INIT = (
    "workers(init=...) is not run for a mixture's components yet: call the setup from the "
    "components' first stage instead"
)

WorkerInit = Callable[[int, int], Any]

_called: set[int] = set()  # ids of the functions this process has called (kept alive below)
_kept: list[Any] = []
_lock = threading.Lock()


def check_init(init: Any) -> WorkerInit | None:
    """`init` if it can be a worker init function (or None); raises naming it otherwise."""
    if init is not None and not callable(init):
        raise InvalidArgumentError(
            f"workers(init=...) takes a function of (worker_index, worker_count), got {init!r}"
        )
    checked: WorkerInit | None = init
    return checked


def run_init(init: WorkerInit, index: int, count: int) -> None:
    """Calls `init(index, count)`; what it raises becomes a WorkerError that names it."""
    try:
        init(index, count)
    except Exception as exc:
        name = getattr(init, "__qualname__", None) or type(init).__name__
        where = (
            f"the calling process (index {CALLER})"
            if index == CALLER
            else f"worker {index} of {count}"
        )
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        raise WorkerError(
            f"workers(init={name}) raised {type(exc).__name__}: {exc} (called as "
            f"{name}({index}, {count}) in {where}, before its first element)\n{tb}"
        ) from exc


def init_here(init: WorkerInit | None, count: int) -> None:
    """`init(-1, count)` in this (the calling) process, the first time it is asked for."""
    if init is None:
        return
    with _lock:
        if id(init) in _called:
            return
        run_init(init, CALLER, count)
        _called.add(id(init))
        _kept.append(init)  # its id stays its own while the process lives
