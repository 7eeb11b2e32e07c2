"""Telling a stopped worker from a slow one, from the parent's side.

A worker running a slow transform is running, or sleeping in a read: the kernel says `R`, `S`
or `D`, and the parent waits for it as long as `options(timeout_s=...)` allows (by default,
for as long as it takes). A worker stopped by SIGSTOP or SIGTSTP is in state `T` and will not
answer until someone sends it SIGCONT. `StoppedClock` counts how long each process has been
seen stopped, in the parent's own waiting time: a Ctrl-Z that stops the parent along with its
workers does not count, nor does a consumer busy with its training step. A process held by a
debugger (`t`, a tracing stop) is never counted: whoever attached the debugger is in charge.
"""

from __future__ import annotations

import os
import time

STOPPED_S = 10.0  # the default bound on a stopped worker (`Options.stopped_s`)
_LONGEST_STEP_S = 1.0  # at most this much of a gap between two looks counts as stopped time


def process_state(pid: int) -> str:
    """The kernel's one-letter state of `pid` (`R`, `S`, `D`, `T`, `t`, `Z`, ...), or "" where
    the process is gone or the system has no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return ""
    end = stat.rfind(b")")  # the name in parentheses may hold spaces and parentheses
    return stat[end + 2 : end + 3].decode("ascii", "replace") if end >= 0 else ""


def process_exists(pid: int) -> bool:
    """Whether a process `pid` exists (a zombie too), whoever's child it is."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_stopped(pid: int) -> bool:
    """Whether `pid` is stopped by a signal (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU)."""
    return process_state(pid) == "T"


class StoppedClock:
    """For how long each of a set of processes has been seen stopped, look after look."""

    def __init__(self) -> None:
        self._stopped: dict[int, float] = {}  # key -> seconds seen stopped
        self._last: float | None = None

    def look(self, stopped: list[int]) -> dict[int, float]:
        """Records one look at which keys are stopped now; returns their stopped seconds.

        A key counts the time since the previous look only when it was stopped then too, and
        at most `_LONGEST_STEP_S` of it: time the looker spent elsewhere (stopped itself, or
        not waiting) is not counted against a worker.
        """
        now = time.monotonic()
        step = 0.0 if self._last is None else min(now - self._last, _LONGEST_STEP_S)
        self._last = now
        self._stopped = {key: self._stopped.get(key, -step) + step for key in stopped}
        return dict(self._stopped)

    def forget(self) -> None:
        """Starts over: the next look counts nothing before it."""
        self._stopped.clear()
        self._last = None
