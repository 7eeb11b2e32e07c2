"""What a cache directory holds, as `tpufeed cache ls` shows it, and clearing what is unused.

Clearing takes each entry's lock without waiting and skips an entry that a process holds
(being read, downloaded, or evicted but still open): what it removes frees its space now.
Lock files stay, since removing one under a process waiting on it would break its lock.
"""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass

from tpufeed.storage.cache import layout as files
from tpufeed.storage.cache.layout import CacheLayout, key_of
from tpufeed.storage.cache.space import CacheSpace, delete_unless_held

__all__ = ["CacheEntry", "list_entries", "remove_unused"]


@dataclass(frozen=True)
class CacheEntry:
    """One entry as `tpufeed cache ls` shows it."""

    key: str
    url: str | None
    size: int
    complete: bool  # False: a download in progress (or left by a dead process)
    last_read: float | None


def list_entries(layout: CacheLayout) -> list[CacheEntry]:
    """Cached shards and downloads in progress, by key."""
    try:
        names = sorted(os.listdir(layout.shards))
    except FileNotFoundError:
        return []
    out = []
    for name in names:
        complete = name.endswith(".data")
        if not complete and ".part-" not in name:
            continue
        key = key_of(name)
        st = files.stat(os.path.join(layout.shards, name))
        if st is None:
            continue
        record = files.read_json(layout.record(key)) or {}
        lock = files.stat(layout.lock(key))
        read = lock.st_mtime if lock is not None and lock.st_mtime_ns else None
        out.append(
            CacheEntry(key, record.get("url") if complete else None, st.st_size, complete, read)
        )
    return out


def remove_unused(root: str, layout: CacheLayout, space: CacheSpace) -> tuple[int, int, int]:
    """Removes every entry not in use now (the caller holds the global lock); returns (files
    removed, shard bytes freed, entries skipped because a process holds them)."""
    removed = freed = skipped = 0
    by_key: dict[str, list[str]] = {}
    for name in os.listdir(layout.shards):
        by_key.setdefault(key_of(name), []).append(name)
    for key, members in sorted(by_key.items()):
        fd = layout.open_lock(key)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                skipped += 1
                continue
            if space.held(key):  # open in a reader: deleting it frees nothing
                skipped += 1
                continue
            for name in members:
                if name.endswith(".lock"):
                    continue  # lock files stay: removing one under a waiter breaks it
                path = os.path.join(layout.shards, name)
                st = files.stat(path)
                if st is not None and files.remove(path):
                    removed += 1
                    counted = name.endswith(".data") or ".part-" in name
                    freed += st.st_size if counted else 0
        finally:
            os.close(fd)
    for entry in os.scandir(layout.evicted):
        st = files.stat(entry.path)
        if st is not None and delete_unless_held(entry.path):
            removed, freed = removed + 1, freed + st.st_size
    for sub in ("meta", "tmp", "tfrecord-index"):
        path = os.path.join(root, sub)
        if os.path.isdir(path):
            removed += sum(files.remove(e.path) for e in os.scandir(path) if e.is_file())
    return removed, freed, skipped
