"""Room in the shard cache: count what is on disk, evict, reserve, all under one global lock.

The limit bounds the disk that shard copies take, in whole blocks of the cache's filesystem:
every copy (its size rounded up to a block, plus room for its record), every download in
progress (a part file created at its full size before the first byte arrives), and every
evicted copy that a reader still has open (see `cache_holds`). Bookkeeping outside `shards/`
is not counted: `meta/`, `plans/` and `tmp/` take about a block per object and per process,
`tfrecord-index/` 16 bytes per TFRecord record.

Every reservation happens under the cache's global `flock`: the files are listed, the victims
the chooser names are evicted if nobody is using them (their entry lock is free), and the new
object's part file is created at its full size. Parts turn into data files under the same lock,
so the listing always sees each byte once, and the total never exceeds the limit whatever the
number of processes. A victim that a reader holds open frees nothing until it is closed: it is
moved to `evicted/`, its reader closes it within moments, and the reservation waits for that.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from tpufeed.errors import SourceError
from tpufeed.observe import counts, timeline
from tpufeed.storage.cache.eviction import VictimChooser
from tpufeed.storage.cache.holds import stuck_holds
from tpufeed.storage.cache.layout import CacheLayout, key_of, remove, stat
from tpufeed.storage.objects import RemoteObject

__all__ = ["CacheSpace", "delete_unless_held"]

log = logging.getLogger("tpufeed.cache")

SPACE_WAIT_S = 600.0  # a reader gives up when no room appears for this long
# A waiting reader counts on evicted copies still open to be closed for this long; then it
# evicts copies nobody holds rather than wait for those.
PATIENT_S = 1.0
# A reader gives up sooner when what fills the cache is evicted copies that its own process
# keeps reading for this long (threads reading more shards at once than the cache holds).
STUCK_S = 5.0
_RECORD_BYTES = 4096  # what a copy's record may take (a URL of up to 1 KiB, and its stamp)


class CacheSpace:
    """The byte budget of one cache directory."""

    def __init__(self, layout: CacheLayout, max_bytes: int):
        self.layout = layout
        self.max_bytes = max_bytes
        self._block: int | None = None

    @property
    def block(self) -> int:
        """The allocation unit of the cache's filesystem."""
        if self._block is None:
            probe = self.layout.root
            while not os.path.isdir(probe) and os.path.dirname(probe) != probe:
                probe = os.path.dirname(probe)
            try:
                self._block = max(512, os.statvfs(probe).f_frsize)
            except OSError:
                self._block = 4096
        return self._block

    def footprint(self, size: int) -> int:
        """Disk a copy of `size` bytes takes in this cache, with its record."""
        return _round_up(size, self.block) + _round_up(_RECORD_BYTES, self.block)

    def _allocated(self, st: os.stat_result) -> int:
        """Disk a file takes: its blocks, and at least its size in whole blocks (a part file is
        sparse until its download fills it)."""
        return max(st.st_blocks * 512, _round_up(st.st_size, self.block))

    @contextlib.contextmanager
    def global_lock(self) -> Iterator[None]:
        self.layout.make_dirs()
        fd = os.open(
            os.path.join(self.layout.root, ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644
        )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def reserve(
        self, obj: RemoteObject, key: str, victims: VictimChooser, wait: bool
    ) -> str | None:
        """Makes room for `obj` and creates its full-size part file; None if no room (no wait)."""
        started = time.monotonic()
        pause = 0.005
        while True:
            waited = time.monotonic() - started
            with self.global_lock():
                part = self._try_reserve(obj, key, victims, patient=not wait or waited < PATIENT_S)
            if part is not None or not wait:
                return part
            stuck = stuck_holds(self.layout, STUCK_S) if waited > STUCK_S else []
            if stuck:
                raise SourceError(
                    f"{obj.url}: no room in the shard cache at {self.layout.root} (limit "
                    f"{self.max_bytes:,} bytes, {self.usage():,} in use): this process keeps "
                    f"reading {len(stuck)} evicted shard(s) ({', '.join(h.key for h in stuck)}) "
                    "while it waits for this one, so it reads more shards at once than the cache "
                    f"holds; raise cache_bytes (a shard takes {self.footprint(obj.size):,} bytes) "
                    "or read fewer shards at once",
                    path=obj.url,
                )
            if waited > SPACE_WAIT_S:
                raise SourceError(
                    f"{obj.url}: no room in the shard cache at {self.layout.root} for "
                    f"{SPACE_WAIT_S:.0f} s (limit {self.max_bytes:,} bytes, {self.usage():,} in "
                    "use); raise cache_bytes",
                    path=obj.url,
                )
            time.sleep(pause)
            pause = min(0.05, pause * 2)

    def _try_reserve(
        self, obj: RemoteObject, key: str, victims: VictimChooser, patient: bool
    ) -> str | None:
        copies, used, closing = self.scan()
        need = used + self.footprint(obj.size) - self.max_bytes
        if need > 0 and not self._make_room(
            obj, key, copies, need, closing if patient else 0, victims
        ):
            return None
        part = os.path.join(self.layout.shards, f"{key}.part-{os.getpid()}-{os.urandom(4).hex()}")
        with open(part, "xb") as f:
            f.truncate(obj.size)
        return part

    def _make_room(
        self,
        obj: RemoteObject,
        key: str,
        copies: dict[str, tuple[int, float]],
        need: int,
        closing: int,
        victims: VictimChooser,
    ) -> bool:
        """Frees `need` bytes by deleting copies nobody uses, in the chooser's order; True if
        done. Otherwise evicts the held copies (open in a reader) whose closing makes the room,
        counting `closing` bytes already on their way, and returns False: try again later."""
        evictable = [(k, size, last) for k, (size, last) in copies.items() if k != key]
        taken: list[tuple[str, int, bool]] = []  # (key, entry lock fd, held open by a reader)
        now = later = 0
        try:
            for victim in victims(evictable, need):
                if now >= need or now + later + closing >= need:
                    break
                fd = self.layout.open_lock(victim)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)  # being read right now
                    continue
                held = self.held(victim)
                taken.append((victim, fd, held))
                if held:
                    later += copies[victim][0]
                else:
                    now += copies[victim][0]
            for victim, _, held in taken:
                if held == (now < need):  # enough: delete the free ones; else evict the held
                    self._evict_for(obj, victim, copies[victim][0], held)
            return now >= need
        finally:
            for _, fd, _ in taken:
                os.close(fd)

    def _evict_for(self, obj: RemoteObject, victim: str, disk: int, held: bool) -> None:
        """Evicts `victim` (taking `disk` bytes) to make room for `obj`, and counts it."""
        self.evict(victim)
        counts.count("cache_evictions")
        timeline.instant(
            "cache eviction", "cache", {"key": victim, "bytes": disk, "for": obj.url, "held": held}
        )
        log.debug(
            "evicted %s (%d bytes%s) for %s", victim, disk, ", closing" if held else "", obj.url
        )

    def held(self, key: str) -> bool:
        """Whether a reader holds the entry's copy open (a `CopyHold`)."""
        try:
            fd = os.open(self.layout.data(key), _PROBE)
        except FileNotFoundError:
            return False
        return not _nobody_holds(fd)

    def evict(self, key: str) -> None:
        """Deletes the entry's copy and record, or moves the copy to `evicted/` while a reader
        holds it open. Call with the entry's lock held exclusively, under the global lock."""
        data = self.layout.data(key)
        if self.held(key):
            gone = os.path.join(
                self.layout.evicted, f"{key}.evicted-{os.getpid()}-{os.urandom(4).hex()}"
            )
            try:
                os.rename(data, gone)
            except FileNotFoundError:
                pass
        else:
            remove(data)
        remove(self.layout.record(key))

    def scan(self) -> tuple[dict[str, tuple[int, float]], int, int]:
        """Complete copies {key: (disk, last read)}, the disk all counted files take, and the
        part of it in evicted copies still open (to be freed when their readers close them).

        Call under the global lock. Part files left by a dead process (entry lock free), and
        evicted copies nobody holds any more, go.
        """
        copies: dict[str, tuple[int, float]] = {}
        used = closing = 0
        record = _round_up(_RECORD_BYTES, self.block)
        for entry in os.scandir(self.layout.shards):  # before evicted/: a copy moves there
            name = entry.name
            if name.endswith(".data"):
                st = stat(entry.path)
                if st is None:
                    continue
                key = name[: -len(".data")]
                lock = stat(self.layout.lock(key))
                read = lock.st_mtime if lock else 0.0
                disk = self._allocated(st) + record
                copies[key] = (disk, read if read >= st.st_mtime else math.inf)
                used += disk
            elif ".part-" in name:
                if self._abandoned(key_of(name)) and remove(entry.path):
                    continue
                st = stat(entry.path)
                used += self._allocated(st) + record if st is not None else 0  # None: failed
        for entry in os.scandir(self.layout.evicted):
            if delete_unless_held(entry.path):
                continue
            st = stat(entry.path)
            if st is not None:
                used += self._allocated(st)
                closing += self._allocated(st)
        return copies, used, closing

    def _abandoned(self, key: str) -> bool:
        return _nobody_holds(self.layout.open_lock(key))

    def usage(self) -> int:
        """Disk that cached copies, downloads in progress and evicted copies still open take
        now (what the limit bounds)."""
        total = 0
        record = _round_up(_RECORD_BYTES, self.block)
        seen: set[tuple[int, int]] = set()  # a copy evicted meanwhile is listed in both folders
        for folder in (self.layout.shards, self.layout.evicted):
            try:
                entries = list(os.scandir(folder))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                name = entry.name
                if folder == self.layout.shards and not (
                    name.endswith(".data") or ".part-" in name
                ):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    st = entry.stat()
                    if (st.st_dev, st.st_ino) in seen:
                        continue
                    seen.add((st.st_dev, st.st_ino))
                    total += self._allocated(st)
                    total += record if folder == self.layout.shards else 0
        return total


# Opening a file only to see whether a reader holds its lock: never blocks, even on a FIFO
# put in a copy's place (which is then found unheld and removed).
_PROBE = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


def delete_unless_held(path: str) -> bool:
    """Deletes an evicted copy unless a reader still holds it; True if it is gone."""
    try:
        fd = os.open(path, _PROBE)
    except FileNotFoundError:
        return True
    return _nobody_holds(fd, then=lambda: remove(path))


def _nobody_holds(fd: int, then: Callable[[], Any] | None = None) -> bool:
    """Whether no one holds a lock on the open file `fd` (an exclusive lock taken at once),
    running `then` while that lock is held; closes `fd`."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    else:
        if then is not None:
            then()
        return True
    finally:
        os.close(fd)


def _round_up(n: int, block: int) -> int:
    return -(-n // block) * block
