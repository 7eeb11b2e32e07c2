"""Calls into a run's native store client (jax.distributed's coordination client, a torch
store) from tpufeed's daemon threads, made safe at the process's exit.

The heartbeat, the agreement's calls, the pod's summaries and the clock measurement call the
client on daemon threads. Such a call runs native code with the GIL released. If Python
finalises meanwhile, the thread is ended (`pthread_exit`) as the call returns, and that
unwinding through the client's C++ frames aborts the whole process after the user's program
has finished: "terminate called after throwing an instance of ''", "FATAL: exception not
rethrown", SIGABRT, a core file and a failed job.

So every such call goes through `guarded(client)`. At the process's exit (an atexit hook:
those run before daemon threads are ended, and before JAX's own hook shuts its client down)
new calls raise `Exiting`, and the exit waits for the calls in flight to return, and for the
threads started by `start` (the clock measurement's, which stop on `Exiting`) to end, for at
most `EXIT_WAIT_S` in all: the longest call tpufeed makes blocks for one heartbeat
(`heartbeat.BEAT_S`, 1 s). A thread left in a pure-Python wait ends harmlessly.
"""

from __future__ import annotations

import atexit
import functools
import os
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["EXIT_WAIT_S", "Exiting", "Guarded", "exiting", "guarded", "start"]

EXIT_WAIT_S = 3.0  # how long the exit waits for calls in flight and threads, at most


class Exiting(Exception):
    """The process exits: no new call into its store's client is made."""


_state = threading.Condition()
_in_flight = 0  # calls into a guarded client that have not returned
_exiting = False
_threads: set[threading.Thread] = set()
_hooked = False


class Guarded:
    """`client` whose every method call is counted while in flight, and refused with `Exiting`
    once the process exits."""

    def __init__(self, client: Any):
        self.client = client

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.client, name)
        return functools.partial(_call, attribute) if callable(attribute) else attribute


def guarded(client: Any) -> Guarded:
    """`client` guarded (a guarded client as it is)."""
    return client if isinstance(client, Guarded) else Guarded(client)


def exiting() -> bool:
    """Whether the process exits (its atexit hooks run)."""
    return _exiting


def start(target: Callable[..., None], args: tuple[Any, ...], name: str) -> None:
    """`target(*args)` on a daemon thread that the process's exit waits for (bounded): the
    thread must end soon once `exiting()` (its calls raise `Exiting`)."""
    with _state:
        _hook()
        thread = threading.Thread(target=_tracked, args=(target, args), name=name, daemon=True)
        _threads.add(thread)
    thread.start()


def _tracked(target: Callable[..., None], args: tuple[Any, ...]) -> None:
    try:
        target(*args)
    finally:
        with _state:
            _threads.discard(threading.current_thread())


def _call(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    global _in_flight
    with _state:
        if _exiting:
            raise Exiting("this process exits: no more calls to the run's store")
        _hook()
        _in_flight += 1
    try:
        return method(*args, **kwargs)
    finally:
        with _state:
            _in_flight -= 1
            _state.notify_all()


def _hook() -> None:
    """The exit hook, registered once (under `_state`)."""
    global _hooked
    if not _hooked:
        atexit.register(_wait_at_exit)
        _hooked = True


def _wait_at_exit() -> None:
    """At exit: no new call; the calls in flight and the threads of `start` waited for."""
    global _exiting
    deadline = time.monotonic() + EXIT_WAIT_S
    with _state:
        _exiting = True
        _state.wait_for(lambda: _in_flight == 0, timeout=EXIT_WAIT_S)
        running = list(_threads)
    for thread in running:
        thread.join(max(0.0, deadline - time.monotonic()))


def _forked() -> None:
    """A forked child has none of its parent's calls or threads."""
    global _state, _in_flight
    _state, _in_flight = threading.Condition(), 0
    _threads.clear()


os.register_at_fork(after_in_child=_forked)
