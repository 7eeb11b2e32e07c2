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


def _stat(pid: int) -> list[bytes]:
    """The fields of /proc/PID/stat from the state on (field 3), or [] where the process is
    gone or the system has no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return []
    end = stat.rfind(b")")  # the name in parentheses may hold spaces and parentheses
    return stat[end + 2 :].split() if end >= 0 else []


def process_state(pid: int) -> str:
    """The kernel's one-letter state of `pid` (`R`, `S`, `D`, `T`, `t`, `Z`, ...), or "" where
    the process is gone or the system has no /proc."""
    fields = _stat(pid)
    return fields[0].decode("ascii", "replace") if fields else ""


def zombie_status(pid: int) -> int | None:
    """How `pid` ended (a returncode: negative for a signal) while it is a zombie that its
    parent has not reaped, read from the kernel (`exit_code`, the last field of
    /proc/PID/stat); None while it runs, or once it is reaped. A zombie whose parent is stopped
    stays one: this is how it is known to have ended without asking that parent."""
    fields = _stat(pid)
    if len(fields) < 50 or fields[0] != b"Z":  # exit_code is field 52 (Linux 3.5 and later)
        return None
    return os.waitstatus_to_exitcode(int(fields[-1]))


def start_time(pid: int) -> int | None:
    """When `pid` started, in clock ticks since boot (field 22 of /proc/PID/stat): with the pid,
    it names one process for as long as the machine runs, even once the pid is reused."""
    fields = _stat(pid)
    return int(fields[19]) if len(fields) > 19 else None


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
