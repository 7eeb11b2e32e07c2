"""Holds on cached copies kept open: an evicted copy still open keeps its disk space counted.

A file deleted while a reader has it open keeps its blocks until the reader closes it, so the
cache counts such copies against its limit until then. A reader that keeps a copy open after
`ShardCache.pinned` takes a `CopyHold` on it (a shared `flock` on the file itself, taken while
pinned); eviction moves a held copy to `evicted/` instead of deleting it, and the space scan
counts the evicted files that are still held and deletes the others (`CacheSpace.scan`).

Each process runs one releaser thread while it has holds: it closes the holds whose holders
were let go without closing them, and when one of its held copies has been evicted, it asks
the holder to close it (the holder's `on_evicted`, which closes the reader and
then the hold) unless the holder is reading it just then, and asks again a moment later.

In a forked child the inherited holds stay open, untouched, like the readers they stand for.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable

from tpufeed.storage.cache.layout import CacheLayout, key_of, stamp

__all__ = ["CopyHold", "stuck_holds"]

log = logging.getLogger("tpufeed.cache")

RELEASE_EVERY_S = 0.02  # how often a process looks for evicted copies it holds

_lock = threading.Lock()
_holds: set[CopyHold] = set()
_releaser_pid: int | None = None
_fork_hooked = False


class CopyHold:
    """A shared lock on one cached copy, taken while pinned and kept while the copy is open.

    `on_evicted` closes the holder's open copy and then this hold; it may decline (a read in
    progress) and is asked again. It is kept as a weak reference: a holder that is collected
    has closed its copy, and its hold is closed with it by the releaser thread, within
    `RELEASE_EVERY_S` (not only once the copy is evicted).
    """

    def __init__(self, layout: CacheLayout, key: str, on_evicted: Callable[[], None] | None):
        # Without blocking: a FIFO swapped in since the copy was checked is seen as changed.
        fd = os.open(layout.data(key), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            st = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        self.layout = layout
        self.key = key
        self.stamp = stamp(st)
        self.stuck_since: float | None = None  # when its holder first declined to close it
        self._fd = fd
        self._holder: Callable[[], Callable[[], None] | None] | None = None
        if on_evicted is not None:
            self._holder = (
                weakref.WeakMethod(on_evicted)
                if hasattr(on_evicted, "__self__")
                else lambda: on_evicted
            )
        with _lock:
            _holds.add(self)
            _start_releaser()

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def close(self) -> None:
        """Drops the hold (call after closing the copy): an evicted copy is then deleted."""
        with _lock:
            fd, self._fd = self._fd, -1
            _holds.discard(self)
        if fd >= 0:
            os.close(fd)

    def orphaned(self) -> bool:
        """Whether its holder was collected without closing it (a dataset let go)."""
        return self._holder is not None and self._holder() is None

    def evicted(self) -> bool:
        """Whether the held copy is no longer the entry's data file."""
        try:
            return stamp(os.stat(self.layout.data(self.key)))[:2] != self.stamp[:2]
        except FileNotFoundError:
            return True

    def _release(self) -> None:
        on_evicted = self._holder() if self._holder is not None else None
        if self._holder is not None and on_evicted is None:
            self.close()  # the holder is gone, and its open copy with it
            return
        if on_evicted is not None:
            try:
                on_evicted()
            except Exception:
                log.debug("closing the evicted copy %s failed", self.key, exc_info=True)
        if not self.closed and self.stuck_since is None:
            self.stuck_since = time.monotonic()

    def __repr__(self) -> str:
        return f"CopyHold({self.key!r}, {'closed' if self.closed else 'open'})"


def stuck_holds(layout: CacheLayout, for_s: float) -> list[CopyHold]:
    """This process's holds on evicted copies of `layout`'s cache whose holders have declined
    to close them for `for_s` seconds: copies read while this process waits for room."""
    now = time.monotonic()
    with _lock:
        holds = [h for h in _holds if h.layout.root == layout.root]
    return [h for h in holds if h.stuck_since is not None and now - h.stuck_since >= for_s]


def _start_releaser() -> None:
    """Starts this process's releaser thread unless it runs. Call under `_lock`."""
    global _releaser_pid, _fork_hooked
    if not _fork_hooked:
        os.register_at_fork(after_in_child=_forget_in_child)
        _fork_hooked = True
    if _releaser_pid != os.getpid():
        _releaser_pid = os.getpid()
        threading.Thread(target=_release_evicted, name="tpufeed-cache-release", daemon=True).start()


def _release_evicted() -> None:
    global _releaser_pid
    while True:
        time.sleep(RELEASE_EVERY_S)
        with _lock:
            if not _holds:
                _releaser_pid = None
                return
            holds = list(_holds)
        # Evictions are rare: one listing per cache says which held keys may have been evicted.
        evicted_keys: dict[str, set[str]] = {}
        for hold in holds:
            if hold.orphaned():  # its reader is gone, and the copy it had open with it
                hold.close()
                continue
            folder = hold.layout.evicted
            if folder not in evicted_keys:
                try:
                    evicted_keys[folder] = {key_of(name) for name in os.listdir(folder)}
                except FileNotFoundError:
                    evicted_keys[folder] = set()
            if hold.key in evicted_keys[folder] and not hold.closed and hold.evicted():
                hold._release()


def _forget_in_child() -> None:
    """A forked child leaves its parent's holds open and never releases them itself."""
    global _lock, _releaser_pid
    _lock = threading.Lock()
    _holds.clear()
    _releaser_pid = None
