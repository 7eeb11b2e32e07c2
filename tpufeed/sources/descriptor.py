"""`OwnDescriptor`: a shard's file descriptor, opened on its first read and owned by the process
that opened it.

It is closed by `close()` or when the shard is let go, left out when the shard is pickled (the process that unpickles it
opens its own), and given up in a forked child, whose copy shares the parent's file offset:
the child closes its copy and opens its own on its next read (`_after_fork`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from tpufeed.sources._after_fork import forget_in_children

__all__ = ["OwnDescriptor"]


class OwnDescriptor:
    """Mixin: `_fd` (None until opened) and the `_lock` that guards opening it; call
    `_init_descriptor()` from `__init__`."""

    _fd: int | None
    _lock: threading.Lock

    def _init_descriptor(self) -> None:
        self._fd = None
        self._lock = threading.Lock()
        forget_in_children(self)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __del__(self, _close: Callable[[int], None] = os.close) -> None:
        """A shard dropped without `close()` (a dataset let go) does not keep its file open.
        `os.close` is bound here: a shard still held as the interpreter exits is collected
        after its module's names are cleared."""
        fd = getattr(self, "_fd", None)
        if fd is not None:
            try:
                _close(fd)
            except OSError:
                pass

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_fd"] = None
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        forget_in_children(self)

    def _after_fork_in_child(self) -> None:
        """In a forked child: its copy of the parent's descriptor is closed (reopened on the
        next read); a fresh lock, as a thread the child does not have may have held it."""
        inherited, self._fd = self._fd, None
        self._lock = threading.Lock()
        if inherited is not None:
            os.close(inherited)
