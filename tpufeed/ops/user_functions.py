"""The user's functions at a stage's edges: checked when the stage is built, and what they raise
turned into a `TransformError` that names the stage, the record and its file.

Anything a transform raises is its own failure, `BaseException`s included: `SystemExit` (an
`argparse` or `sys.exit` inside it), `GeneratorExit`, a library's own `BaseException`. Two kinds
pass through unchanged, because they are not the transform's (`is_interruption`):

- `Stopped`: tpufeed stopping the code that runs a transform (a closed iterator's prefetch
  thread, a worker told to exit).
- `KeyboardInterrupt` where it may be a real Ctrl-C: in the main thread of a process whose
  SIGINT handler is a Python function (the default one raises it). There a transform that
  raises it itself cannot be told from Ctrl-C, so it stops the iterator as Ctrl-C does, with a
  note naming the stage and the record. Elsewhere (worker processes, which ignore SIGINT; a
  prefetch thread; a process that ignores SIGINT) no Ctrl-C can raise it, and it is a
  `TransformError` like any other.
"""

from __future__ import annotations

import signal
import threading
import traceback
from collections.abc import Callable
from typing import Any, Protocol

from tpufeed.errors import InvalidArgumentError, TransformError


class RecordNames(Protocol):
    """Names records in error messages."""

    def describe(self, record: int) -> str: ...

    def path_of(self, record: int) -> str | None: ...


class Stopped(BaseException):
    """Raised by tpufeed into code that may be inside a transform, to stop it; never taken for
    the transform's own failure (a BaseException, so a user's `except Exception` lets it by)."""


def check_callable(fn: Any, stage: str) -> Any:
    """`fn`, if it can be called as a transform; raises naming the stage otherwise. A class
    whose instances are callable (a transform class passed without `()`) is refused too: each
    element would become a transform object (see `uncalled_class`)."""
    if not callable(fn):
        raise InvalidArgumentError(f"{stage} needs a callable, got {fn!r}")
    mistake = uncalled_class(fn)
    if mistake is not None:
        raise InvalidArgumentError(
            f"{stage}({fn.__name__}): {mistake} Its instances are the transforms (they define "
            f"__call__), so each element would become a {fn.__name__} object. To make one from "
            f"each element on purpose, pass `lambda element: {fn.__name__}(element)`"
        )
    return fn


def uncalled_class(fn: Any) -> str | None:
    """Why `fn` is a transform class rather than a transform: a class whose instances define
    `__call__` (`DecodeImage`, not `DecodeImage()`); None for anything else.

    Classes whose instances are not callable (`int`, `str`, `np.float32`, `tuple`) are
    ordinary functions of the element and pass; so do metaclasses (`type`).

    >>> class Double:
    ...     def __call__(self, x): return 2 * x
    >>> uncalled_class(Double), uncalled_class(Double()), uncalled_class(int)
    ('Double is a class; did you mean Double()?', None, None)
    """
    if not isinstance(fn, type) or issubclass(fn, type):
        return None
    if not any("__call__" in vars(base) for base in fn.__mro__ if base is not object):
        return None
    return f"{fn.__name__} is a class; did you mean {fn.__name__}()?"


_forked_child_end: list[Callable[[BaseException], None]] = []


def end_forked_child_with(end: Callable[[BaseException], None]) -> None:
    """In a process that a transform forked inside a worker (`run/workers/strays.py`): `end(exc)`
    ends it where its transform's failure is first handled, so tpufeed's code never runs on in
    it as if it were the worker (nor runs the transform again to name the record)."""
    _forked_child_end[:] = [end]


def is_interruption(exc: BaseException) -> bool:
    """Whether `exc`, raised while a transform ran, stops the run rather than naming the
    transform (see the module docstring): tpufeed's `Stopped`, or a KeyboardInterrupt that
    may be a real Ctrl-C. Every failure of a transform passes here first."""
    for end in _forked_child_end:
        end(exc)
    if isinstance(exc, Stopped):
        return True
    if not isinstance(exc, KeyboardInterrupt):
        return False
    if threading.current_thread() is not threading.main_thread():
        return False  # signals are handled in the main thread only
    return callable(signal.getsignal(signal.SIGINT))  # SIG_IGN, SIG_DFL: no KeyboardInterrupt


def transform_error(
    stage: str, exc: BaseException, record: int | None, names: RecordNames
) -> TransformError:
    """A TransformError naming the stage, the record and its file, with the traceback."""
    where = names.describe(record) if record is not None else "a batch"
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return TransformError(
        f"{stage} raised {type(exc).__name__}: {exc} (on {where})\n{tb}",
        record=record,
        path=names.path_of(record) if record is not None else None,
        traceback_text=tb,
    )


def interrupted_at(exc: BaseException, stage: str, record: int | None, names: RecordNames) -> None:
    """Notes on a KeyboardInterrupt passing through where it landed (the stage, and the record
    where one element was running), so its traceback says what it stopped."""
    add_note = getattr(exc, "add_note", None)  # Python 3.11 and later
    if isinstance(exc, KeyboardInterrupt) and add_note is not None:
        on = f" on {names.describe(record)}" if record is not None else ""
        add_note(f"(tpufeed: it came while {stage} ran{on})")
