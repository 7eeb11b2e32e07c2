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
start as fresh interpreters, as before.
"""

from __future__ import annotations

import json
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from typing import Any

from tpufeed.run.workers.environment import worker_environment
from tpufeed.run.workers.liveness import STOPPED_S, StoppedClock, is_stopped, process_exists

_PRELOAD = (
    "ctypes",
    "numpy",
    "cloudpickle",
    "tpufeed.run.chunks",
    "tpufeed.run.workers.worker",
    "tpufeed.run.workers.layout",
    "tpufeed.sources.array_record.source",
    "tpufeed.sources.tfrecord.source",
)
_HEADER = struct.Struct("<I")
_STATUS_KEPT = 4096  # exit statuses remembered for the parent to ask about
_LOOK_S = 0.5  # how often a wait for the server's reply checks that the server still runs


# -- the parent's side ------------------------------------------------------------------------

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
                    "tpufeed.run.workers.forkserver", [str(theirs.fileno()), str(os.getpid())]
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

    def spawn(self, argv: list[str], fds: list[int]) -> int:
        """Asks for a worker running `python -m tpufeed.run.workers.worker` with `argv`, where each
        "{i}" in argv stands for the worker's number of `fds[i]`; returns a ticket for `pid`."""
        with self._lock:
            socket.send_fds(
                self.sock, [_frame(("spawn", argv, sys.path, dict(os.environ), _cwd()))], fds
            )
            return self._ticket()

    def pid(self, ticket: int, stopped_s: float | None = STOPPED_S) -> int:
        reply = self._result(ticket, stopped_s)
        if reply[0] != "pid":
            raise OSError(f"the tpufeed fork server could not start a worker: {reply[1]}")
        return reply[1]

    def status(self, pid: int, stopped_s: float | None = STOPPED_S) -> int | None:
        """How worker `pid` ended (a returncode: negative for a signal), None while it runs."""
        with self._lock:
            self.sock.sendall(_frame(("status", pid)))
            ticket = self._ticket()
        return self._result(ticket, stopped_s)[1]

    def alive(self) -> bool:
        return self.owner == os.getpid() and self._broken is None and self.proc.poll() is None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

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
                    header = _read_exactly(self.sock, _HEADER.size)
                    body = (
                        None
                        if header is None
                        else _read_exactly(self.sock, _HEADER.unpack(header)[0])
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


# -- the server -------------------------------------------------------------------------------


def _frame(message: Any) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(body)) + body


def _read_exactly(sock: socket.socket, n: int, fds: list[int] | None = None) -> bytes | None:
    data = b""
    while len(data) < n:
        if fds is not None:
            chunk, got, _, _ = socket.recv_fds(sock, n - len(data), 16)
            fds.extend(got)
        else:
            chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


class _Server:
    def __init__(self, sock: socket.socket, parent: int):
        self.sock, self.parent = sock, parent
        self.statuses: dict[int, int] = {}
        self.children: set[int] = set()

    def reap(self, *_: Any) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self.statuses[pid] = os.waitstatus_to_exitcode(status)
            while len(self.statuses) > _STATUS_KEPT:
                del self.statuses[next(iter(self.statuses))]

    def serve(self) -> None:
        watch = _parent_watch(self.parent)
        while True:
            ready = select.select([self.sock] + ([watch] if watch is not None else []), [], [])[0]
            if watch is not None and watch in ready:
                return  # the parent exited: so does the server (its workers watch it too)
            fds: list[int] = []
            header = _read_exactly(self.sock, _HEADER.size, fds)
            if header is None:
                return
            body = _read_exactly(self.sock, _HEADER.unpack(header)[0], fds)
            if body is None:
                return
            request = pickle.loads(body)
            if request[0] == "spawn":
                _, argv, path, env, cwd = request
                self.sock.sendall(_frame(self.spawn(argv, path, env, cwd, fds)))
            elif request[0] == "status":
                self.reap()
                pid = request[1]
                status = self.statuses.get(pid)
                if status is None and pid not in self.children:
                    status = 0 if not process_exists(pid) else None
                self.sock.sendall(_frame(("status", status)))

    def spawn(
        self, argv: list[str], path: list[str], env: dict[str, str], cwd: str | None, fds: list[int]
    ) -> tuple[str, Any]:
        try:
            argv = [arg.format(*fds) for arg in argv]
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])  # reap after we know it
            try:
                pid = os.fork()
                if pid == 0:  # the worker
                    _run_worker(self.sock, argv, path, env, cwd)
                self.children.add(pid)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
            return ("pid", pid)
        except Exception as error:  # noqa: BLE001 - the parent falls back and says why
            return ("error", f"{type(error).__name__}: {error}")
        finally:
            for fd in fds:
                os.close(fd)


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # removed under us: the worker stays where the server is
        return None


def _run_worker(
    sock: socket.socket, argv: list[str], path: list[str], env: dict[str, str], cwd: str | None
) -> None:
    """The forked worker: the parent's environment, directory and import path as they are now
    (as a fresh interpreter started now would have them), not as they were when the server
    started."""
    code = 1
    try:
        _name_process(b"tpufeed-worker")
        sock.close()
        os.environ.clear()
        os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
        sys.path[:] = path
        helper = sys.modules.get("tpufeed.sources.array_record._reader_process")
        if helper is not None:  # this server imported array_record and never used it
            helper.claim_native_state()
        from tpufeed.run.workers import worker

        code = worker.main(argv)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream: nothing to flush
                pass
        os._exit(code)


def _name_process(name: bytes) -> None:
    """What `ps -o comm`, `top` and psutil's `name()` show (Linux; elsewhere nothing)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(15, name, 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def _parent_watch(parent: int) -> int | None:
    """A file that turns readable when `parent` exits (a pidfd), or None where there is none."""
    try:
        return os.pidfd_open(parent)
    except (AttributeError, OSError):
        return None


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _name_process(b"tpufeed-forksrv")
    sock = socket.socket(fileno=int(argv[0]))
    parent = int(argv[1])
    try:
        for name in _PRELOAD:
            try:
                __import__(name)
            except ImportError:
                pass  # an extra that is not installed: the worker that needs it says so
        server = _Server(sock, parent)
        signal.signal(signal.SIGCHLD, server.reap)
        server.serve()
    except (BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
