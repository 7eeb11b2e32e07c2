"""ArrayRecord reads for a forked process, done by a fresh interpreter it starts.

array_record's native library (Riegeli) keeps process-wide state: a pool of zstd contexts and
a background thread that evicts them, waiting on a mutex for up to a minute after the last read.
A process forked while that thread waits (so: after any ArrayRecord file was opened, counted or
read) inherits the mutex with a waiter that no longer exists; once the child starts a thread of
its own on the dead thread's reused stack (torch's DataLoader workers do), its next ArrayRecord
read crashes with SIGSEGV. No reopening helps: the broken state is global, not per reader.

So a process that did not load array_record itself (`native_state_inherited()`) reads ArrayRecord
files through one helper: `python -c ...` started on first need, which opens the same
`ArrayRecordFile`s (they are picklable) and answers count and read requests over two pipes.
The helper ends when the pipes close, that is when its process (and any of its own forks)
is gone; Ctrl-C in a terminal is left to that process. tpufeed's own workers need none: the
fork server they come from loads the library but never uses it, so each claims the state
(`claim_native_state`) and reads its files itself.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from tpufeed.errors import SourceError

__all__ = ["ReaderProcess", "claim_native_state", "native_state_inherited"]

# The process that loaded array_record's native library: a fork of it shares that state.
_NATIVE_PID = os.getpid()
_RELEASE_EVERY_S = 1.0
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from tpufeed.sources.array_record._reader_process import serve; serve(int(sys.argv[2]), int(sys.argv[3]))"
)


def native_state_inherited() -> bool:
    """Whether this process is a fork of the one that loaded array_record's native library."""
    return os.getpid() != _NATIVE_PID


def claim_native_state() -> None:
    """Makes this forked process the owner of array_record's native state, read directly.

    Only for a fork of a process that loaded the library but never opened, counted, read or
    wrote a file (the workers' fork server: it imports, nothing more). Loading starts no thread
    and takes no lock; the first open starts Riegeli's thread pool, and that is what a fork
    must not inherit. Workers then read their files themselves, at full speed, rather than
    through a helper process that costs a fresh interpreter's start and a pipe per read.
    """
    global _NATIVE_PID
    _NATIVE_PID = os.getpid()


class ReaderProcess:
    """The helper process of this process; `shared()` starts it on first use."""

    _shared: ReaderProcess | None = None
    _abandoned: list[ReaderProcess] = []  # a forked parent's helper: its pipes are not ours

    def __init__(self) -> None:
        self.owner = os.getpid()
        self._lock = threading.Lock()
        self._sent: set[str] = set()
        requests_r, requests_w = os.pipe()
        replies_r, replies_w = os.pipe()
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, package_root, str(requests_r), str(replies_w)],
                pass_fds=(requests_r, replies_w),
                stdin=subprocess.DEVNULL,
                close_fds=True,
            )
        finally:
            os.close(requests_r)
            os.close(replies_w)
        self._requests = Connection(requests_w, readable=False)
        self._replies = Connection(replies_r, writable=False)

    @classmethod
    def shared(cls) -> ReaderProcess:
        helper = cls._shared
        if helper is None or helper.owner != os.getpid():
            if helper is not None:
                cls._abandoned.append(helper)
            helper = cls._shared = ReaderProcess()
        return helper

    @classmethod
    def running(cls) -> ReaderProcess | None:
        """This process's helper if it has started one (a forked parent's is not)."""
        helper = cls._shared
        return helper if helper is not None and helper.owner == os.getpid() else None

    def call(self, op: str, file: Any, indices: Any = None) -> Any:
        """Runs `op` ("count", "read" or "close") on `file` in the helper; re-raises its error."""
        with self._lock:
            key = file.path
            try:
                self._requests.send((op, key, None if key in self._sent else file, indices))
                self._sent.add(key)
                status, value = self._replies.recv()
            except (EOFError, OSError, BrokenPipeError) as e:
                code = self._proc.poll()
                raise SourceError(
                    f"{file.path}: the process reading ArrayRecord files for this forked process "
                    f"(pid {self._proc.pid}) ended unexpectedly (exit code {code})",
                    path=file.path,
                ) from e
        if status == "error":
            raise value
        return value

    def forget(self, file: Any) -> None:
        """Closes the helper's copy of `file`, if it has one; the next call sends it again."""
        with self._lock:
            if file.path not in self._sent:
                return
        self.call("close", file)
        with self._lock:
            self._sent.discard(file.path)


def serve(requests_fd: int, replies_fd: int) -> None:
    """The helper's loop: answers requests until the asking process closes its pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    requests = Connection(requests_fd, writable=False)
    replies = Connection(replies_fd, readable=False)
    files: dict[str, Any] = {}
    last_release = time.monotonic()
    while True:
        try:
            op, key, file, indices = requests.recv()
        except (EOFError, OSError):
            return
        if file is not None:
            files[key] = file
        try:
            if op == "count":
                reply: tuple = ("ok", len(files[key]))
            elif op == "read":
                reply = ("ok", files[key].read(indices))
            else:
                closing = files.pop(key, None)
                if closing is not None:
                    closing.close()
                reply = ("ok", None)
        except Exception as exc:  # noqa: BLE001 - every failure is raised in the asking process
            reply = ("error", _picklable(exc))
        try:
            replies.send(reply)
        except (EOFError, OSError):
            return
        if time.monotonic() - last_release > _RELEASE_EVERY_S:  # free evicted cached copies
            last_release = time.monotonic()
            for opened in files.values():
                opened.release_if_evicted()


def _picklable(exc: Exception) -> Exception:
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - an error that does not pickle is sent as its text
        return SourceError(
            f"{type(exc).__name__}: {exc}",
            path=getattr(exc, "path", None),
            record=getattr(exc, "record", None),
        )
