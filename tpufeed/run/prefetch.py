"""ThreadPrefetcher: runs a generator on a thread, a bounded number of items ahead.

Used by single-process iterators (`prefetch(n)` with no workers) and by the device adapters.
"""

from __future__ import annotations

import atexit
import ctypes
import queue
import threading
import time
import weakref
from collections.abc import Generator, Iterator
from typing import Any

from tpufeed.ops.user_functions import Stopped

_END = object()
_LIVE_PREFETCHERS: weakref.WeakSet = weakref.WeakSet()
_CLOSE_WAIT_S = 1.0  # how long close() waits for a thread that is inside a slow transform


class PrefetchStopped(Stopped):
    """Raised inside a prefetch thread that outlived `close()` (a BaseException, so a user
    function's `except Exception` does not swallow it, and a `Stopped`, so the stage running
    that function does not take it for the function's failure)."""


class ThreadPrefetcher:
    """Runs a generator on a thread, up to `depth` items ahead; errors re-raise in the consumer."""

    def __init__(
        self, items: Generator[Any, None, None], depth: int, name: str = "tpufeed prefetch"
    ):
        """`name`: the thread's, as it shows on the timeline (`tpufeed.trace`)."""
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=_fill,
            args=(items, self._queue, self._stop),
            name=name,
            daemon=True,
        )
        self._thread.start()
        self._done = False
        _LIVE_PREFETCHERS.add(self)

    def depth(self) -> int:
        return self._queue.qsize()

    @property
    def running(self) -> bool:
        """Whether the thread is still inside the items (a `close()` may outlive it)."""
        return self._thread.is_alive()

    def deepen(self, depth: int) -> None:
        with self._queue.mutex:
            self._queue.maxsize = depth
            self._queue.not_full.notify()

    def get(self, timeout: float | None = None) -> Any:
        """The next item; `queue.Empty` if none came within `timeout` seconds."""
        if self._done:
            raise StopIteration
        kind, value = self._queue.get(timeout=timeout)
        if kind is _END:
            self._done = True
            raise StopIteration
        if kind is BaseException:
            self._done = True
            raise value
        return value

    def close(self) -> None:
        """Stops the thread. Waits at most `_CLOSE_WAIT_S` for it: a thread still inside a slow
        transform then gets `PrefetchStopped` at its next Python line, and is left to end on its
        own (a daemon, its items discarded), so Ctrl-C and exit never wait for a transform."""
        self._stop.set()
        self._done = True
        deadline = time.monotonic() + _CLOSE_WAIT_S
        while self._thread.is_alive() and time.monotonic() < deadline:
            try:  # unblock a producer waiting on a full queue
                self._queue.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(timeout=0.05)
        if self._thread.is_alive() and self._thread.ident is not None:
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(self._thread.ident), ctypes.py_object(PrefetchStopped)
            )


def first_items(items: Iterator[Any], n: int) -> Generator[Any, None, None]:
    """The first `n` of `items`, and no more: `items` is left open where it stood, to go on
    from in another thread (closing this generator does not close them)."""
    if n <= 0:
        return
    for count, item in enumerate(items, 1):
        yield item
        if count == n:
            return


def _fill(items: Generator[Any, None, None], out: queue.Queue, stop: threading.Event) -> None:
    try:
        for item in items:
            while not stop.is_set():
                try:
                    out.put((None, item), timeout=0.1)
                    break
                except queue.Full:
                    continue
            if stop.is_set():
                return
        _put(out, (_END, None), stop)
    except BaseException as exc:  # noqa: BLE001 - handed to the consumer
        _put(out, (BaseException, exc), stop)
    finally:
        items.close()


def _put(out: queue.Queue, entry: tuple, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            out.put(entry, timeout=0.1)
            return
        except queue.Full:
            continue


@atexit.register
def _stop_prefetch_threads() -> None:
    """Stops prefetch threads before the interpreter tears down the readers they are using
    (a C++ reader destroyed under a running daemon thread aborts the process)."""
    for prefetcher in list(_LIVE_PREFETCHERS):
        prefetcher.close()
