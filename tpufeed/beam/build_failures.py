"""A build that stops, read as what happened: Ctrl-C (and SIGTERM, for `tpufeed build`) is noted
while the pipeline runs (Beam re-raises it as a RuntimeError), a file that could not be read or written is one line naming
it, and so is a worker process that died.
"""

from __future__ import annotations

import contextlib
import logging
import re
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tpufeed.errors import SourceError, WorkerError

__all__ = [
    "Terminated",
    "disk_failure",
    "lost_worker",
    "noting_interrupts",
    "os_error_in",
    "terminating_as_interrupt",
]


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, a service manager or a job scheduler stopping the command), taken by
    `tpufeed build` as it takes Ctrl-C: the build stops and removes what it wrote. `signum`
    gives the command its exit status, 128 + 15."""

    signum = signal.SIGTERM


def raise_terminated(signum: int, frame: Any) -> None:
    """A SIGTERM handler: raises `Terminated` where the main thread is."""
    raise Terminated


@contextlib.contextmanager
def terminating_as_interrupt() -> Iterator[None]:
    """SIGTERM raises `Terminated` (a KeyboardInterrupt) for the block, where its action is the
    default: `tpufeed build` stops on it as on Ctrl-C. Library callers keep SIGTERM's default."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


class Interruption:
    """Which signal stopped the pipeline (`signum`; None while none did)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._noted = threading.Event()
        # The signals' wakeup fd (`signal.set_wakeup_fd`): Python's C handler writes each
        # signal's number there the moment it arrives, before the main thread runs the handler
        # (it may be blocked in Beam's gRPC wait while the workers die of the same signal).
        self._wakeup: socket.socket | None = None
        self._wanted: frozenset[int] = frozenset()
        self._arrived = False

    def note(self, signum: int) -> None:
        self.signum = self.signum or signum
        self._noted.set()

    def is_set(self) -> bool:
        return self.signum is not None

    def wait(self, timeout_s: float) -> bool:
        """True once the signal is noted, or has arrived, within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not (self._noted.is_set() or self._signal_arrived()):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._wakeup is None:
                self._noted.wait(min(left, 0.05))
            else:
                select.select([self._wakeup], [], [], min(left, 0.05))
        return True

    def _signal_arrived(self) -> bool:
        wakeup = self._wakeup
        if not self._arrived and wakeup is not None:
            try:
                self._arrived = any(number in self._wanted for number in wakeup.recv(256))
            except OSError:  # nothing there (BlockingIOError), or closed as the build ended
                pass
        return self._arrived

    def watch(self, numbers: Iterable[int]) -> Callable[[], None]:
        """Takes the signals' wakeup fd where nothing else has it (main thread only); returns
        what gives it back."""
        reader, writer = socket.socketpair()
        reader.setblocking(False)
        writer.setblocking(False)
        try:
            previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
        except ValueError:  # not the main thread
            previous = None
        if previous != -1:  # another's (asyncio's, a caller's): left as it was
            if previous is not None:
                signal.set_wakeup_fd(previous)
            reader.close()
            writer.close()
            return lambda: None
        self._wanted = frozenset(numbers)
        self._wakeup = reader

        def give_back() -> None:
            signal.set_wakeup_fd(-1)
            self._wakeup = None
            reader.close()
            writer.close()

        return give_back


@contextlib.contextmanager
def noting_interrupts() -> Iterator[Interruption]:
    """Notes Ctrl-C (and SIGTERM, where `terminating_as_interrupt` takes it) while the pipeline
    runs: Beam re-raises a KeyboardInterrupt in a step as a RuntimeError, which must not read as
    a failed build. A second SIGTERM is ignored while the build removes what it wrote."""
    interrupted = Interruption()
    taken = _signals_taken()
    muted: dict[logging.Logger, int] = {}

    def on_interrupt(signum: int, frame: Any) -> None:
        interrupted.note(signum)
        muted.update(_mute_beam_logs())
        if signum == signal.SIGTERM:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            raise Terminated
        signal.default_int_handler(signum, frame)

    with _quiet_runner(interrupted, taken):
        for number in taken:
            signal.signal(number, on_interrupt)
        try:
            yield interrupted
        finally:
            for number, previous in taken.items():
                signal.signal(number, previous)
            for logger, level in muted.items():
                logger.setLevel(level)


def _signals_taken() -> dict[int, Any]:
    """The signals a build notes, with their handlers now: those still at the defaults that
    raise (a caller's own handler stays), and none off the main thread (signals go there)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {
        number: handler
        for number, handler, ours in (
            (signal.SIGINT, signal.getsignal(signal.SIGINT), signal.default_int_handler),
            (signal.SIGTERM, signal.getsignal(signal.SIGTERM), raise_terminated),
        )
        if handler is ours
    }


@contextlib.contextmanager
def _quiet_runner(interrupted: Interruption, taken: dict[int, Any]) -> Iterator[None]:
    """While the build runs, Beam's runner threads' errors and error logs that come of the
    signal stopping it are dropped (`_quiet_runner_threads`, `_quiet_runner_logs`)."""
    if taken:
        _quiet_runner_threads()
    if not _watched:
        _stopped.clear()  # an earlier build's stop: this one's runner errors are printed
    log_handlers = [*logging.getLogger().handlers, logging.lastResort] if taken else []
    for log_handler in log_handlers:
        if log_handler is not None:
            log_handler.addFilter(_quiet_runner_logs)
    _watched.append(interrupted)
    unwatch = interrupted.watch(taken) if taken else (lambda: None)
    try:
        yield
    finally:
        unwatch()
        _watched.remove(interrupted)
        if interrupted.is_set():
            _stopped.set()
        for log_handler in log_handlers:
            if log_handler is not None:
                log_handler.removeFilter(_quiet_runner_logs)


def _mute_beam_logs() -> dict[logging.Logger, int]:
    """Silences Beam's loggers (for the rest of the build) and returns their levels: after
    Ctrl-C it logs each channel that broke as its workers stopped, as an error."""
    loggers = [logging.getLogger("apache_beam")] + [
        logger
        for name, logger in logging.Logger.manager.loggerDict.items()
        if name.startswith("apache_beam.")
        and isinstance(logger, logging.Logger)
        and logger.level != logging.NOTSET
    ]
    levels = {logger: logger.level for logger in loggers}
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    return levels


def _quiet_runner_threads() -> None:
    """Drops what Beam's and gRPC's threads raise once the build is stopped: after Ctrl-C or a
    SIGTERM to the process group, the workers and channels go away under them, and each would
    print a traceback (about 150 lines with --workers 2, with the runner's logs) around the one
    line that says the build was stopped. The workers die of the signal at once, while the
    main thread may note it a moment later: a runner thread's error waits up to `_GRACE_S` for
    that note before it is printed. Other threads' errors are reported as before."""
    previous = threading.excepthook
    if getattr(previous, "tpufeed_quiet", False):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        if _from_runner(args.exc_traceback) and (_stopped.is_set() or _noted_soon()):
            return
        previous(args)

    hook.tpufeed_quiet = True  # type: ignore[attr-defined]
    threading.excepthook = hook


def _quiet_runner_logs(record: logging.LogRecord) -> bool:
    """A handler's filter while a build runs: Beam's errors about channels that broke as its
    workers died of the signal that stops the build are dropped (`_mute_beam_logs` silences
    them once the signal is noted; these come before)."""
    if not record.name.startswith("apache_beam") or _stopped.is_set():
        return not record.name.startswith("apache_beam")
    return record.levelno < logging.ERROR or not _noted_soon()


def _from_runner(tb: Any) -> bool:
    while tb is not None:
        if _RUNNER_CODE.search(tb.tb_frame.f_code.co_filename):
            return True
        tb = tb.tb_next
    return False


def _noted_soon() -> bool:
    """True when a running build notes Ctrl-C or SIGTERM within `_GRACE_S`."""
    return any(watched.wait(_GRACE_S) for watched in list(_watched))


# A build stopped by a signal in this process: its runner threads die for a while after.
_stopped = threading.Event()
# The interruptions of the builds running now (one, but a library caller may nest them).
_watched: list[Interruption] = []
_GRACE_S = 2.0


_RUNNER_CODE = re.compile(r"[/\\](apache_beam|grpc)[/\\]")


def os_error_in(error: BaseException) -> OSError | None:
    """The OSError behind a failed run: Beam re-raises one met in a step as a RuntimeError
    whose context is the original."""
    seen: BaseException | None = error
    for _ in range(8):  # a chain is short; a bound in case it loops
        if seen is None or isinstance(seen, OSError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def disk_failure(output: str, error: OSError, outer: str) -> SourceError:
    """One line for a file that could not be read or written mid-build: the path, the cause,
    and the step it happened in."""
    step = re.search(r"\[while running '([^']+)'\]", outer)
    where = f" (in step {step.group(1)})" if step else ""
    path = error.filename or output
    return SourceError(
        f"the build into {output} failed at {path}: {error.strerror or error}"
        f"{where}; {output} is as it was (the new dataset's files were removed). Check "
        "that the disk is writable and has room, and run it again",
        path=str(path),
    )


# How Beam's in-process runner reports a worker process that ended in the middle of a bundle.
_WORKER_EXIT = re.compile(r"Worker subprocess exited with return code (-?\d+)")
_LOST_CHANNEL = (
    "Channel closed prematurely",
    "Socket closed",
    "failed to connect to all addresses",
)


def lost_worker(error: BaseException, output: str) -> WorkerError | None:
    """One line for a build whose worker process died (killed, or out of memory), or None if
    `error` is something else. The runner does not retry the bundle, so the build fails."""
    text, seen = "", error
    for _ in range(8):  # the runner's error, its context, and theirs
        text += f"\n{seen}"
        nxt = seen.__cause__ or seen.__context__
        if nxt is None:
            break
        seen = nxt
    exited = _WORKER_EXIT.search(text)
    if exited is None and not any(marker in text for marker in _LOST_CHANNEL):
        return None
    code = int(exited.group(1)) if exited else None
    how = "ended" if code is None else f"exited with code {code}"
    if code is not None and code > 128:
        how += (
            f" (killed by signal {code - 128}{', SIGKILL: out of memory?' if code == 137 else ''})"
        )
    elif code is not None and code < 0:
        how = f"was killed by signal {-code}"
    return WorkerError(
        f"the build into {output} failed: a Beam worker process {how} in the middle of "
        f"its work; {output} is as it was (the new dataset's files were removed). Run the "
        "build again; if a worker keeps dying, give it more memory or use fewer --workers"
    )
