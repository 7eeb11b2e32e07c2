"""Room in the shard cache: count what is there, evict, reserve, all under one global lock.

Every reservation happens under the cache's global `flock`: the files are listed, victims the
chooser names are removed if nobody holds them (their entry lock is free), and the new object's
part file is created at its full size. Parts turn into data files under the same lock, so the
listing always sees each byte once, and the total never exceeds the limit whatever the number
of processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import time
from collections.abc import Iterator

from tpufeed.errors import SourceError
from tpufeed.storage.cache_layout import CacheLayout, key_of, remove, stat
from tpufeed.storage.eviction import VictimChooser
from tpufeed.storage.gcs import GcsObject

__all__ = ["CacheSpace"]

log = logging.getLogger("tpufeed.cache")

SPACE_WAIT_S = 600.0  # a reader gives up when no room appears for this long


class CacheSpace:
    """The byte budget of one cache directory."""

    def __init__(self, layout: CacheLayout, max_bytes: int):
        self.layout = layout
        self.max_bytes = max_bytes

    @contextlib.contextmanager
    def global_lock(self) -> Iterator[None]:
        self.layout.make_dirs()
        fd = os.open(os.path.join(self.layout.root, ".lock"),
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def reserve(self, obj: GcsObject, key: str, victims: VictimChooser,
                wait: bool) -> str | None:
        """Makes room for `obj` and creates its full-size part file; None if no room (no wait)."""
        deadline = time.monotonic() + SPACE_WAIT_S
        pause = 0.005
        while True:
            with self.global_lock():
                part = self._try_reserve(obj, key, victims)
            if part is not None or not wait:
                return part
            if time.monotonic() > deadline:
                raise SourceError(
                    f"{obj.url}: no room in the shard cache at {self.layout.root} for "
                    f"{SPACE_WAIT_S:.0f} s (limit {self.max_bytes:,} bytes, {self.usage():,} in "
                    "use); raise cache_bytes", path=obj.url)
            time.sleep(pause)
            pause = min(0.2, pause * 2)

    def _try_reserve(self, obj: GcsObject, key: str, victims: VictimChooser) -> str | None:
        files, used = self.scan()
        need = used + obj.size - self.max_bytes
        if need > 0:
            evictable = [(k, size, last) for k, (size, last) in files.items() if k != key]
            held: list[tuple[str, int]] = []  # (key, lock fd) of victims nobody is using
            freed = 0
            try:
                for victim in victims(evictable, need):
                    if freed >= need:
                        break
                    fd = self.layout.open_lock(victim)
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        os.close(fd)  # being read right now
                        continue
                    held.append((victim, fd))
                    freed += files[victim][0]
                if freed < need:
                    return None
                for victim, _ in held:
                    remove(self.layout.data(victim))
                    remove(self.layout.record(victim))
                    log.debug("evicted %s (%d bytes) for %s", victim, files[victim][0], obj.url)
            finally:
                for _, fd in held:
                    os.close(fd)
        part = os.path.join(self.layout.shards, f"{key}.part-{os.getpid()}-{os.urandom(4).hex()}")
        with open(part, "xb") as f:
            f.truncate(obj.size)
        return part

    def scan(self) -> tuple[dict[str, tuple[int, float]], int]:
        """Complete files {key: (size, last read)} and the bytes of all data and part files.

        Call under the global lock. Part files left by a dead process (entry lock free) go.
        """
        files: dict[str, tuple[int, float]] = {}
        used = 0
        for entry in os.scandir(self.layout.shards):
            name = entry.name
            if name.endswith(".data"):
                st = stat(entry.path)
                if st is None:
                    continue
                key = name[:-len(".data")]
                lock = stat(self.layout.lock(key))
                read = lock.st_mtime if lock else 0.0
                files[key] = (st.st_size, read if read >= st.st_mtime else math.inf)
                used += st.st_size
            elif ".part-" in name:
                if self._abandoned(key_of(name)) and remove(entry.path):
                    continue
                st = stat(entry.path)
                used += st.st_size if st is not None else 0  # None: its download failed
        return files, used

    def _abandoned(self, key: str) -> bool:
        fd = self.layout.open_lock(key)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    def usage(self) -> int:
        """Bytes of cached and downloading shards now (what the limit bounds)."""
        try:
            entries = list(os.scandir(self.layout.shards))
        except FileNotFoundError:
            return 0
        total = 0
        for entry in entries:
            if entry.name.endswith(".data") or ".part-" in entry.name:
                with contextlib.suppress(FileNotFoundError):
                    total += entry.stat().st_size
        return total
