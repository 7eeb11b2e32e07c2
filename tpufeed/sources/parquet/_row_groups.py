"""Decoded Parquet row groups kept in memory, least recently used first out, within a byte budget.

One `DecodedRowGroups` serves every file of a source, in one process. Pickling (to a worker) and
forking both hand over an empty one with fresh locks: decoded tables are this process's memory,
and a lock a parent thread held at the fork would never be released in the child.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from tpufeed.sources._after_fork import forget_in_children

__all__ = ["DEFAULT_DECODED_BYTES", "DecodedRowGroups"]

DEFAULT_DECODED_BYTES = 256 << 20


class DecodedRowGroups:
    """Arrow tables by (file, row group); the one just decoded stays even when over budget."""

    def __init__(self, max_bytes: int = DEFAULT_DECODED_BYTES):
        self.max_bytes = max_bytes
        self._start_empty()
        forget_in_children(self)

    def _start_empty(self) -> None:
        self._tables: OrderedDict[tuple[str, int], Any] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.decodes = 0  # row groups decoded by this process: what a shuffle costs

    def get(self, key: tuple[str, int], decode: Callable[[], Any]) -> Any:
        """The table at `key`, decoded by `decode()` on a miss (outside the lock: a slow read
        of one row group does not hold up hits on others)."""
        with self._lock:
            table = self._tables.get(key)
            if table is not None:
                self._tables.move_to_end(key)
                return table
        table = decode()
        with self._lock:
            self.decodes += 1
            if key not in self._tables:
                self._tables[key] = table
                self._bytes += table.nbytes
            while self._bytes > self.max_bytes and len(self._tables) > 1:
                _, old = self._tables.popitem(last=False)
                self._bytes -= old.nbytes
        return table

    def clear(self) -> None:
        with self._lock:
            self._tables.clear()
            self._bytes = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"max_bytes": self.max_bytes}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.max_bytes = state["max_bytes"]
        self._start_empty()
        forget_in_children(self)

    def _after_fork_in_child(self) -> Any:
        inherited = self._tables
        self._start_empty()
        return inherited
