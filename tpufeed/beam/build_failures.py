"""A build that stops, read as what happened: Ctrl-C is noted while the pipeline runs (Beam
re-raises it as a RuntimeError), and a file that could not be read or written is one line
naming it.
"""

from __future__ import annotations

import contextlib
import re
import signal
import threading
from collections.abc import Iterator
from typing import Any

from tpufeed.errors import SourceError

__all__ = ["disk_failure", "noting_interrupts", "os_error_in"]


@contextlib.contextmanager
def noting_interrupts() -> Iterator[threading.Event]:
    """An event set by Ctrl-C while the pipeline runs: Beam re-raises a KeyboardInterrupt in a
    step as a RuntimeError, which must not read as a failed build."""
    interrupted = threading.Event()
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield interrupted  # signals go to the main thread; a caller's own handler stays
        return

    def on_interrupt(signum: int, frame: Any) -> None:
        interrupted.set()
        signal.default_int_handler(signum, frame)

    signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield interrupted
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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
        f"{where}; no manifest was written. Check that the disk is writable "
        "and has room, and run it again",
        path=str(path),
    )
