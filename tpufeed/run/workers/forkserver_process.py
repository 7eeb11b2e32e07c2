"""The fork server's own process: `python -m tpufeed.run.workers.forkserver_process SOCKET_FD
PARENT_PID` (the parent's side, and why there is a server: `forkserver.py`).

It imports what every worker needs (`PRELOAD`), then forks a worker for each request on its
socket, where the worker's pipes arrive as file descriptors (SCM_RIGHTS) and its pid goes back;
it reaps its children and tells the parent how one ended. It exits when the parent closes the
socket or exits. As it starts, before it forks a worker, it removes the shared-memory segments
of iterators whose process is gone (`segment_owners.remove_orphans`).
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import struct
import sys
from typing import Any

from tpufeed.run.workers.liveness import process_exists
from tpufeed.run.workers.segment_owners import remove_orphans

PRELOAD = (
    "ctypes",
    "numpy",
    "cloudpickle",
    "tpufeed.run.chunks",
    "tpufeed.run.workers.worker",
    "tpufeed.run.workers.layout",
    "tpufeed.sources.array_record.source",
    "tpufeed.sources.tfrecord.source",
)
HEADER = struct.Struct("<I")
_STATUS_KEPT = 4096  # exit statuses remembered for the parent to ask about


def frame(message: Any) -> bytes:
    """One message on the socket: its pickle, after its length."""
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(body)) + body


def read_exactly(sock: socket.socket, n: int, fds: list[int] | None = None) -> bytes | None:
    """`n` bytes from `sock` (file descriptors that come with them added to `fds`), or None
    once it is closed."""
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
            header = read_exactly(self.sock, HEADER.size, fds)
            if header is None:
                return
            body = read_exactly(self.sock, HEADER.unpack(header)[0], fds)
            if body is None:
                return
            request = pickle.loads(body)
            if request[0] == "spawn":
                _, argv, path, env, cwd = request
                self.sock.sendall(frame(self.spawn(argv, path, env, cwd, fds)))
            elif request[0] == "status":
                self.reap()
                pid = request[1]
                status = self.statuses.get(pid)
                if status is None and pid not in self.children:
                    status = 0 if not process_exists(pid) else None
                self.sock.sendall(frame(("status", status)))

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
        remove_orphans()  # a job killed whole left its segments: gone before a worker starts
        for name in PRELOAD:
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
