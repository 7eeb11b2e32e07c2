"""Workers forked from one warm process, so N workers cost one interpreter start, not N.

A fresh interpreter that imports numpy, tpufeed and the record readers costs ~0.4 s of CPU.
Started as N fresh interpreters, N workers pay that N times, all at once, on the cores the
parent is producing its first batches on. The fork server pays it once: it is started (a fresh
interpreter, never a fork of the user's process, so nothing of the user's threads, JAX or open
readers crosses a fork) the first time a pipeline starts workers, imports what every worker
needs, and from then on forks each worker in a few milliseconds: for this iterator's workers,
the next epoch's, an elastic restart's, an autotune trial's.

It imports no user module (those may start threads, and a thread does not survive a fork): a
worker imports the pipeline's modules itself, after the fork, as it unpickles the pipeline.
Nor does it open any file: array_record's native library is loaded here but never used, so a
worker reads its ArrayRecord files itself (`_reader_process.claim_native_state`).

The parent talks to it over a Unix socket: a worker's pipes travel as file descriptors
(SCM_RIGHTS), the answer is its pid; the server reaps its children and tells the parent how one
ended. It exits when the parent closes the socket or exits. Where it cannot start, workers
start as fresh interpreters, as before. This module is the parent's side; the server's process
is `forkserver_process.py`. No wait on the server is unbounded: one that is stopped (SIGSTOP)
is given up after `stopped_s`, whether the parent waits for its reply or for room in its
socket.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import socket
import subprocess
import sys
import threading
from typing import Any

from tpufeed.run.workers.environment import worker_environment
from tpufeed.run.workers.forkserver_process import HEADER, frame, read_exactly
from tpufeed.run.workers.liveness import STOPPED_S, StoppedClock, is_stopped

_LOOK_S = 0.5  # how often a wait for the server's reply checks that the server still runs


# Runs a module as __main__ after setting sys.path to the parent's (argv: module, path, args).
_BOOT = (
    "import json, runpy, sys; module = sys.argv[1]; sys.path[:] = json.loads(sys.argv[2]); "
    "sys.argv[1:] = sys.argv[3:]; runpy.run_module(module, run_name='__main__', alter_sys=True)"
)


def python_running(module: str, args: list[str]) -> list[str]:
    """The command for a fresh interpreter running `module` with `args` that imports what this
    process imports: `python -m` would put the working directory first on sys.path, so a
    process that took tpufeed from elsewhere (PYTHONPATH, a path it inserted itself) would
    get workers running another copy of it."""
    return [sys.executable, "-c", _BOOT, module, json.dumps([str(p) for p in sys.path]), *args]


class ForkServer:
    """The parent's handle on its fork server (one per process, started on first use).

    Nothing here waits for the server's imports: requests queue in the socket and are answered
    in order once it is warm, so the parent starts producing at once, as with fresh workers.
    """

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen(
                python_running(
                    "tpufeed.run.workers.forkserver_process",
                    [str(theirs.fileno()), str(os.getpid())],
                ),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                env=worker_environment(),
                close_fds=True,
            )
        finally:
            theirs.close()
        self.sock = ours
        self.owner = os.getpid()
        self._lock = threading.Lock()
        self._sent = 0  # requests sent; their replies come back in the same order
        self._replies: dict[int, Any] = {}  # read, not collected yet
        self._read = 0
        self._broken: str | None = None  # why it cannot answer: every later request fails at once

    def spawn(self, argv: list[str], fds: list[int], stopped_s: float | None = STOPPED_S) -> int:
        """Asks for a worker running `python -m tpufeed.run.workers.worker` with `argv`, where each
        "{i}" in argv stands for the worker's number of `fds[i]`; returns a ticket for `pid`."""
        with self._lock:
            request = ("spawn", argv, sys.path, dict(os.environ), _cwd())
            self._send(frame(request), fds, stopped_s)
            return self._ticket()

    def pid(self, ticket: int, stopped_s: float | None = STOPPED_S) -> int:
        reply = self._result(ticket, stopped_s)
        if reply[0] != "pid":
            raise OSError(f"the tpufeed fork server could not start a worker: {reply[1]}")
        return reply[1]

    def status(self, pid: int, stopped_s: float | None = STOPPED_S) -> int | None:
        """How worker `pid` ended (a returncode: negative for a signal), None while it runs."""
        with self._lock:
            self._send(frame(("status", pid)), [], stopped_s)
            ticket = self._ticket()
        return self._result(ticket, stopped_s)[1]

    def give_up(self, why: str) -> None:
        """Fails every later request at once, saying `why`; `shared_server()` then starts a
        new server."""
        self._broken = self._broken or why

    def alive(self) -> bool:
        return self.owner == os.getpid() and self._broken is None and self.proc.poll() is None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        if is_stopped(self.proc.pid):  # it would never see the socket close
            self.proc.kill()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _send(self, data: bytes, fds: list[int], stopped_s: float | None) -> None:
        """Writes one request (with `fds` on its first byte). Where the socket is full, waits for
        room as `_result` waits for a reply: OSError once the server has ended or stayed
        stopped `stopped_s`; a server that cannot answer fails every later request at once."""
        if self._broken is not None:
            raise OSError(self._broken)
        view, clock = memoryview(data), StoppedClock()
        while view:
            if not select.select([], [self.sock], [], _LOOK_S)[1]:
                self._broken = self._why_not_running(clock, stopped_s)
                if self._broken is not None:
                    raise OSError(self._broken)
                continue
            try:
                if fds:
                    sent = socket.send_fds(self.sock, [view], fds, socket.MSG_DONTWAIT)
                else:
                    sent = self.sock.send(view, socket.MSG_DONTWAIT)
            except BlockingIOError:
                continue
            except OSError:  # reset: it died
                self._broken = f"the tpufeed fork server (pid {self.proc.pid}) {self._ended()}"
                raise OSError(self._broken) from None
            view, fds = view[sent:], []

    def _ticket(self) -> int:
        self._sent += 1
        return self._sent - 1

    def _result(self, ticket: int, stopped_s: float | None) -> Any:
        """The reply to `ticket`. The wait ends with OSError, saying why, if the server exits or
        stays stopped (SIGSTOP) for `stopped_s` (None: wait on); a busy server is waited for."""
        with self._lock:
            clock = StoppedClock()
            while ticket not in self._replies:
                if self._broken is not None:
                    raise OSError(self._broken)
                if not select.select([self.sock], [], [], _LOOK_S)[0]:
                    self._broken = self._why_not_running(clock, stopped_s)
                    continue
                try:
                    header = read_exactly(self.sock, HEADER.size)
                    body = (
                        None
                        if header is None
                        else read_exactly(self.sock, HEADER.unpack(header)[0])
                    )
                except OSError:  # reset: it died with requests unread
                    body = None
                if body is None:
                    self._broken = f"the tpufeed fork server (pid {self.proc.pid}) {self._ended()}"
                    continue
                self._replies[self._read] = pickle.loads(body)
                self._read += 1
            return self._replies.pop(ticket)

    def _why_not_running(self, clock: StoppedClock, stopped_s: float | None) -> str | None:
        """Why the server will not answer (it ended, or has stayed stopped `stopped_s`), or
        None while it runs."""
        if self.proc.poll() is not None:
            return f"the tpufeed fork server (pid {self.proc.pid}) {self._ended()}"
        stopped = clock.look([0] if is_stopped(self.proc.pid) else []).get(0, 0.0)
        if stopped_s is not None and stopped >= stopped_s:
            return (
                f"the tpufeed fork server (pid {self.proc.pid}) has been stopped (SIGSTOP) for "
                f"{stopped:.0f} s (options(stopped_s={stopped_s:g}))"
            )
        return None

    def _ended(self) -> str:
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "closed its socket"
        return f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"


_server: ForkServer | None = None
_server_lock = threading.Lock()
_unavailable = False


def shared_server() -> ForkServer | None:
    """This process's fork server, started if need be; None where one cannot run (then
    workers start as fresh interpreters)."""
    global _server, _unavailable
    if _unavailable or os.environ.get("TPUFEED_FORKSERVER", "1") == "0" or not hasattr(os, "fork"):
        return None
    with _server_lock:
        if _server is not None and not _server.alive():
            if _server.owner == os.getpid():
                _server.close()
            _server = None  # a fork of the process that started it: start this one's own
        if _server is None:
            try:
                _server = ForkServer()
            except OSError:  # no interpreter to start, no socket: fresh workers, as before
                _unavailable = True
                return None
        return _server


def stop_shared_server() -> None:
    global _server
    with _server_lock:
        if _server is not None and _server.owner == os.getpid():
            _server.close()
        _server = None


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # removed under us: the worker stays where the server is
        return None
