"""Open readers never cross a fork: a forked child drops what its parent had open, untouched.

A process forked while one of its threads is inside an ArrayRecord read (a prefetch thread, or
a pipeline iterator running when torch's DataLoader forks its workers) hands the child a copy of
that C++ reader in the middle of a read: buffers half updated, mutexes held by a thread the child
does not have. Reading it in the child crashes the process; destroying it can too. So right after
a fork, in the child, every registered object gives up its process-bound handles (readers,
read-ahead threads, locks): they are moved to `_INHERITED`, which keeps them alive and never
touches them (their memory stays shared with the parent, copy on write, and each keeps its file
descriptor open), and the object starts again with fresh locks, reopening its file on first read.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Protocol

__all__ = ["ForkAware", "forget_in_children"]


class ForkAware(Protocol):
    def _after_fork_in_child(self) -> Any:
        """Drops this process's handles and makes fresh locks; returns what must stay untouched."""
        ...


_REGISTERED: weakref.WeakSet = weakref.WeakSet()
_INHERITED: list[Any] = []  # handles a parent opened: kept alive in the child, never used
_hooked = False


def forget_in_children(obj: ForkAware) -> None:
    """Registers `obj`: in a forked child, `obj._after_fork_in_child()` runs before anything else."""
    global _hooked
    if not _hooked:
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _hooked = True
    _REGISTERED.add(obj)


def _after_fork_in_child() -> None:
    for obj in list(_REGISTERED):
        _INHERITED.append(obj._after_fork_in_child())
