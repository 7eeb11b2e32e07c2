"""The passes started over one Dataset's `to_torch()`, written where every process can read them.

torch starts a pass where the loop's process cannot see it: with `num_workers=W` each worker
calls `iter()` on its own copy of the IterableDataset (new workers each pass, or persistent
ones told to start again). So the count lives in a small shared file, not in any one copy:
an anonymous file (memfd) that the loop's process makes, that forked workers inherit and that
spawned ones receive as multiprocessing passes its own descriptors. It holds a JSON table,
read and rewritten under a POSIX record lock (one process at a time; the kernel releases a
dead holder's lock; a holder killed mid-write leaves the new table whole, or the old one):

- `next`: the pass the next new one is (`set_epoch(e)` writes e);
- `pending`: a state set in the loop's process (`set_state`), taken by the next pass;
- `passes`: the latest passes begun by DataLoader workers, each with its members.

Workers of one pass agree by a key they all hold: the DataLoader's base seed (drawn afresh for
each iterator), the worker count, and how many passes this process has begun (inherited at
fork, counted on by persistent workers). The first member to arrive begins the pass; the
others join it. A worker that arrives with a key whose pass it has already joined begins a
new one (a loader re-created with the same seeded generator).

>>> book = book_of(ds); book.claim(None, None, pass_of)  # in the loop's process  # doctest: +SKIP
(0, None)
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import threading
import weakref
from collections.abc import Callable
from multiprocessing import context, reduction
from typing import Any

from tpufeed.errors import StateError

__all__ = ["Member", "PassBook", "book_of"]

Member = tuple[int, int, int, int]  # (base seed, workers, passes begun here, worker id)
KEPT = 16  # workers' passes remembered: far more than run at once

_BOOKS: dict[int, PassBook] = {}


def book_of(ds: Any) -> PassBook:
    """The book of `ds` (this Dataset object): every `to_torch()` of it counts in one."""
    key = id(ds)
    book = _BOOKS.get(key)
    if book is None:
        book = _BOOKS[key] = PassBook()
        weakref.finalize(ds, _BOOKS.pop, key, None)
    return book


class PassBook:
    """The shared table of one Dataset's passes (see the module docstring)."""

    def __init__(self, fd: int | None = None, table: dict[str, Any] | None = None):
        self._fd = _anonymous_file() if fd is None else fd
        self._closer = weakref.finalize(self, os.close, self._fd)
        self._pid, self._lock = os.getpid(), threading.Lock()
        if table is not None or fd is None:
            self._write(table or {"next": 0, "pending": None, "passes": []})

    def upcoming(self) -> tuple[int, Any]:
        """(the pass a new one would be, the state set for it or None), taking nothing."""
        with self._locked():
            table = self._read()
        return table["next"], table["pending"]

    def select(self, epoch: int) -> None:
        """The next new pass is `epoch` (`set_epoch`); a state set for a pass still goes first."""
        with self._locked():
            table = self._read()
            table["next"] = epoch
            self._write(table)

    def set_pending(self, state: Any) -> None:
        """The next pass begun anywhere (this process or a worker) continues after `state`."""
        with self._locked():
            table = self._read()
            table["pending"] = state
            self._write(table)

    def claim(
        self, member: Member | None, own: Any, pass_of: Callable[[Any], int]
    ) -> tuple[int, Any]:
        """Begins (or, for a worker, joins) a pass: (its number, the state it continues, or
        None for its start). `own` is a worker's own state (StatefulDataLoader restores one
        per worker); otherwise a pending state goes to the pass that takes it first."""
        with self._locked():
            table = self._read()
            joined = _joined(table, member)
            if joined is not None:
                number, state = joined
                if own is not None:
                    number, state = pass_of(own), own
            else:
                state = own
                if state is None:
                    state, table["pending"] = table["pending"], None
                number = table["next"] if state is None else pass_of(state)
                if member is not None:
                    shared = None if own is not None else state
                    entry = [list(member[:3]), number, shared, [member[3]]]
                    table["passes"] = (table["passes"] + [entry])[-KEPT:]
            table["next"] = number + 1
            self._write(table)
        return number, state

    def __reduce__(self) -> Any:
        if context.get_spawning_popen() is not None:  # a worker being spawned: share the file
            return _shared, (reduction.DupFd(self._fd),)
        with self._locked():  # a copy (deepcopy, pickle): the same table, its own file
            return PassBook, (None, self._read())

    def _locked(self) -> _Locked:
        if self._pid != os.getpid():  # forked: the parent's thread lock may be held there
            self._pid, self._lock = os.getpid(), threading.Lock()
        return _Locked(self._lock, self._fd)

    def _read(self) -> dict[str, Any]:
        data = os.pread(self._fd, os.fstat(self._fd).st_size, 0)
        try:  # the first JSON value: a writer killed before its truncate left a tail after it
            table, _ = json.JSONDecoder().raw_decode(data.decode())
        except ValueError as e:
            raise StateError(
                f"to_torch()'s pass book is unreadable ({e}): {data[:200]!r}"
            ) from None
        return dict(table)

    def _write(self, table: dict[str, Any]) -> None:
        data = json.dumps(table).encode()  # written whole, then the old tail cut off
        os.pwrite(self._fd, data, 0)
        os.ftruncate(self._fd, len(data))


class _Locked:
    """This process's thread lock, then the file's record lock (which threads share)."""

    def __init__(self, lock: threading.Lock, fd: int):
        self._lock, self._fd = lock, fd

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            fcntl.lockf(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._lock.release()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)
        finally:
            self._lock.release()


def _joined(table: dict[str, Any], member: Member | None) -> tuple[int, Any] | None:
    """(pass, state) of the pass `member` joins: one begun under its key that it is not in."""
    if member is None:
        return None
    for entry in reversed(table["passes"]):
        key, number, state, members = entry
        if key == list(member[:3]):
            if member[3] in members:
                return None  # it has been in that pass: this is a new one
            members.append(member[3])
            return number, state
    return None


def _anonymous_file() -> int:
    """A file with no name (nothing to leave behind), closed on exec."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("tpufeed-passes", os.MFD_CLOEXEC)
    with tempfile.TemporaryFile() as named:  # unlinked at once where there is no memfd
        return os.dup(named.fileno())


def _shared(dupfd: Any) -> PassBook:
    """In a spawned worker: the book on the descriptor multiprocessing passed."""
    return PassBook(dupfd.detach())
