"""The local-SSD shard cache: gs:// objects kept as verified local files within a byte limit.

Files live under the cache directory (default `$TPUFEED_CACHE_DIR`, else `~/.cache/tpufeed`;
layout in `cache_layout`). The byte limit bounds the disk that shard copies take: whole shards,
downloads in progress, and evicted shards still open in a reader (`cache_space`).

- Downloads land atomically: a full-size part file, filled by ranged GETs, read back and checked
  against the object's size and CRC32C, then renamed (`cache_fill`).
- Several processes share one directory through `flock`s (gone with a dead process): a reader
  holds the entry's lock shared while it opens a copy (`pinned`), a downloader or evictor holds
  it exclusive, and room is made under one global lock (`cache_space`). An open copy is read
  without locks for as long as it is `unchanged`, and `hold`s it meanwhile: an evicted copy
  stays readable through its open handle, counted against the limit, until the reader closes
  it (on its next read, or when asked to, see `cache_holds`); it reopens (re-fetches) it then.
- A disk that is full, read-only or not a directory is reported naming the cache directory,
  the shard and the fix (`cache_errors`).
- A restarted job trusts a file whose stat stamp (inode, size, mtime, ctime, boot) is what it
  was when verified; any other file, or one a read found damaged, is re-checked against the
  CRC32C, and fetched again if it fails (`cache_verified`).
- `entries` and `clear` (the `tpufeed cache` command) look at the directory as a whole
  (`cache_inventory`).

>>> cache = ShardCache("/mnt/ssd/tpufeed", max_bytes=100 << 30)  # doctest: +SKIP
>>> with cache.pinned(obj) as path:  # fetched if needed; not evicted inside the block
...     data = open(path, "rb").read()  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

from tpufeed.errors import CorruptDataError, InvalidArgumentError, SourceError
from tpufeed.observe import counts
from tpufeed.storage.cache import layout as files
from tpufeed.storage.cache.disk_errors import check_not_a_file, disk_errors
from tpufeed.storage.cache.eviction import PlanBoard, VictimChooser
from tpufeed.storage.cache.fill import CacheFiller
from tpufeed.storage.cache.holds import CopyHold
from tpufeed.storage.cache.inventory import CacheEntry, list_entries, remove_unused
from tpufeed.storage.cache.layout import CacheLayout, default_cache_dir, entry_key
from tpufeed.storage.cache.space import CacheSpace
from tpufeed.storage.cache.transfers import PART_BYTES, URGENT
from tpufeed.storage.cache.verified import VerifiedCopies
from tpufeed.storage.derived import read_derived, remove_dead_temporaries_once, write_derived
from tpufeed.storage.objects import RemoteObject
from tpufeed.storage.opener import open_regular
from tpufeed.storage.retry import RetryPolicy

__all__ = ["CacheEntry", "ShardCache", "default_cache_dir", "entry_key", "opened_caches"]

# Without an explicit limit: this share of the space free when the cache is opened.
_DEFAULT_SHARE_OF_FREE = 0.8
# A reader marks an entry read (its lock file's mtime) at most this often per process: the
# least-recently-read order and the read-ahead's view of progress come from these marks.
_TOUCH_EVERY_S = 0.1
# An open copy found unchanged is not looked at again for this long (a stat per read of a small
# batch costs several percent on a VM).
_RECHECK_S = 0.02


class ShardCache:
    """A directory of verified gs:// objects under a byte limit, shared by processes.

    `max_bytes=None`: 80% of the space free on its filesystem when opened, plus what it holds.
    `max_bytes=0`: no copies at all (TFRecord files are then read by ranged GETs).
    """

    def __init__(
        self,
        directory: str | os.PathLike | None = None,
        max_bytes: int | None = None,
        *,
        downloads: int = 8,
        part_bytes: int = PART_BYTES,
        retry: RetryPolicy | None = None,
    ):
        if max_bytes is not None and (
            not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0
        ):
            raise InvalidArgumentError(
                f"cache_bytes must be None or an int >= 0, got {max_bytes!r}"
            )
        if not isinstance(downloads, int) or isinstance(downloads, bool) or downloads < 1:
            raise InvalidArgumentError(f"downloads must be an int >= 1, got {downloads!r}")
        if not isinstance(part_bytes, int) or isinstance(part_bytes, bool) or part_bytes < 1 << 16:
            raise InvalidArgumentError(f"part_bytes must be an int >= 65536, got {part_bytes!r}")
        self.root = os.path.abspath(
            os.fspath(directory) if directory is not None else default_cache_dir()
        )
        check_not_a_file(self.root)
        self.layout = CacheLayout(self.root)
        self.space = CacheSpace(self.layout, 0)
        self.max_bytes = max_bytes if max_bytes is not None else self._default_limit()
        self.space.max_bytes = self.max_bytes
        self.plans = PlanBoard(self.layout)
        self.downloads = downloads
        self.part_bytes = part_bytes
        self.retry = retry or RetryPolicy()
        self.verified = VerifiedCopies(self.layout)
        self.filler = CacheFiller(self.layout, self.space, self.verified, self.retry, part_bytes)
        self._touched: dict[str, tuple[float, list[int]]] = {}
        self._checked: dict[str, tuple[float, list[int]]] = {}
        _opened.add(self)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_touched"], state["_checked"] = {}, {}
        return state

    def __repr__(self) -> str:
        return f"ShardCache({self.root!r}, max_bytes={self.max_bytes:,})"

    @property
    def shards_dir(self) -> str:
        return self.layout.shards

    def data_path(self, obj: RemoteObject) -> str:
        return self.layout.data(entry_key(obj))

    def usage(self) -> int:
        """Disk that cached, downloading and evicted-but-open shards take now (what the limit
        bounds)."""
        return self.space.usage()

    def footprint(self, size: int) -> int:
        """Disk a shard of `size` bytes takes in this cache (whole blocks, and its record)."""
        return self.space.footprint(size)

    def _default_limit(self) -> int:
        return int(files.free_bytes(self.root) * _DEFAULT_SHARE_OF_FREE) + self.usage()

    # -- reading -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def pinned(self, obj: RemoteObject) -> Iterator[str]:
        """The local path of `obj`, fetched first if needed, safe from eviction in the block."""
        self._check_fits(obj)
        key = entry_key(obj)
        data = self.layout.data(key)
        with self._disk_errors(obj):
            fd = self.layout.open_lock(key)
        try:
            with self._disk_errors(obj):
                missed = False
                while True:
                    fcntl.flock(fd, fcntl.LOCK_SH)
                    st = files.stat(data)
                    if st is not None and self.verified.trusted(key, obj, st):
                        break
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    missed = True
                    self.filler.fill(obj, key, fd, self.plans.chooser(), URGENT, wait=True)
                counts.count("cache_misses" if missed else "cache_hits")
            self._mark_read(key, files.stamp(st))
            yield data
        finally:
            os.close(fd)  # drops the lock

    def open_copy(self, obj: RemoteObject) -> int:
        """The verified local copy of `obj` open for reading, through the opener (call inside
        `pinned`): a regular file (anything else in its place is refused without blocking on
        it), and the very file verified (its stat stamp), else `CorruptDataError` naming it."""
        key = entry_key(obj)
        data = self.layout.data(key)
        shown = f"{obj.url} (its cached copy {data})"
        fd = open_regular(data, shown)
        try:
            if not self.verified.trusted(key, obj, os.fstat(fd)):
                raise CorruptDataError(
                    f"{shown} changed after it was verified (another file put in its place, "
                    "or written to): it is checked again and fetched again on the next read",
                    path=obj.url,
                )
        except BaseException:
            os.close(fd)
            raise
        return fd

    def hold(self, obj: RemoteObject, on_evicted: Callable[[], None] | None = None) -> CopyHold:
        """Counts the local copy of `obj` against the limit after an eviction, until closed.

        Take it while pinned, once the copy is open; close it after the copy. `on_evicted`
        closes the copy and the hold if it can (it is asked again if it cannot, see
        `cache_holds`).
        """
        return CopyHold(self.layout, entry_key(obj), on_evicted)

    def prefetch(self, obj: RemoteObject, victims: VictimChooser, priority: float) -> str:
        """Fetches `obj` unless cached or busy: 'fetched', 'cached', 'busy' or 'no-room'."""
        self._check_fits(obj)
        with self._disk_errors(obj):
            return self._prefetch(obj, victims, priority)

    def _prefetch(self, obj: RemoteObject, victims: VictimChooser, priority: float) -> str:
        key = entry_key(obj)
        fd = self.layout.open_lock(key)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return "busy"  # being downloaded, or read (so present)
            st = files.stat(self.layout.data(key))
            if st is not None and self.verified.trusted(key, obj, st):
                return "cached"
            fcntl.flock(fd, fcntl.LOCK_UN)
            return self.filler.fill(obj, key, fd, victims, priority, wait=False) or "no-room"
        finally:
            os.close(fd)

    def recheck(self, obj: RemoteObject) -> bool:
        """Verifies the cached copy of `obj` now; True if it was damaged (and removed) or gone."""
        key = entry_key(obj)
        with self._disk_errors(obj):
            fd = self.layout.open_lock(key)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with self._disk_errors(obj):
                return not self.filler.keep_if_sound(obj, key)
        finally:
            os.close(fd)

    def stamp(self, obj: RemoteObject) -> list[int] | None:
        """The stat stamp of the local copy now (call while pinned), None if there is none."""
        st = files.stat(self.data_path(obj))
        return None if st is None else files.stamp(st)

    def unchanged(self, obj: RemoteObject, stamp: list[int] | None, mark: bool = True) -> bool:
        """Whether the local copy is still the verified one a reader opened with `stamp`.

        A reader that holds the copy open reads on without a lock while this holds: an evicted
        file stays readable through an open handle, and `unchanged` turns false (within
        `_RECHECK_S`) once it is evicted, replaced or written to, so the reader reopens it,
        pinned, on its next read (damage found in between fails the format's own checks).
        `mark` records the read (for least-recently-read order and the read-ahead's progress).
        """
        key = entry_key(obj)
        now = time.monotonic()
        checked, checked_stamp = self._checked.get(key, (-math.inf, None))
        if stamp is not None and stamp == checked_stamp and now - checked < _RECHECK_S:
            return True
        st = files.stat(self.layout.data(key))
        if st is None or stamp is None or files.stamp(st) != stamp:
            return False
        self._checked[key] = (now, stamp)
        if mark:
            self._mark_read(key, stamp)
        return True

    def contains(self, obj: RemoteObject) -> bool:
        """Whether a verified copy of `obj` is in the cache now (it may go at any time)."""
        key = entry_key(obj)
        st = files.stat(self.layout.data(key))
        return st is not None and self.verified.trusted(key, obj, st)

    def last_read_ns(self, obj: RemoteObject) -> int:
        """When a reader last used `obj` (any process; within `_TOUCH_EVERY_S`), or 0."""
        st = files.stat(self.layout.lock(entry_key(obj)))
        return st.st_mtime_ns if st is not None else 0

    def _check_fits(self, obj: RemoteObject) -> None:
        if self.footprint(obj.size) > self.max_bytes:
            raise SourceError(
                f"{obj.url}: {obj.size:,} bytes do not fit in the shard cache at {self.root} "
                f"(limit {self.max_bytes:,} bytes; the shard takes {self.footprint(obj.size):,} "
                "on disk with its record); raise cache_bytes",
                path=obj.url,
            )

    def _disk_errors(self, obj: RemoteObject | None) -> contextlib.AbstractContextManager[None]:
        return disk_errors(self.root, self.max_bytes, obj.url if obj is not None else None)

    def _mark_read(self, key: str, stamp: list[int]) -> None:
        now = time.time()
        last, last_stamp = self._touched.get(key, (0.0, None))
        if now - last > _TOUCH_EVERY_S or stamp != last_stamp:
            self._touched[key] = (now, stamp)
            with contextlib.suppress(OSError):
                os.utime(self.layout.lock(key))

    # -- facts about objects ------------------------------------------------------------------

    def recall(self, obj: RemoteObject, fact: str) -> Any:
        """A fact remembered about `obj` (its record count), or None. The facts are a derived
        file of the object's version, checked by CRC32C on first use (a damaged one is
        removed with a warning, and the fact found again)."""
        return self._facts(obj).get(fact)

    def remember(self, obj: RemoteObject, fact: str, value: Any) -> None:
        path = self.layout.meta(entry_key(obj))
        record = self._facts(obj) or {"url": obj.url, "version": obj.version}
        record[fact] = value
        text = json.dumps(record).encode()
        with contextlib.suppress(OSError):  # a cache of facts; failing to keep one is harmless
            self.layout.make_dirs()
            remove_dead_temporaries_once(os.path.dirname(path))
            write_derived(path, lambda out: out.write(text))

    def _facts(self, obj: RemoteObject) -> dict[str, Any]:
        data = read_derived(self.layout.meta(entry_key(obj)), f"the facts kept about {obj.url}")
        try:
            record = json.loads(data) if data is not None else {}
        except ValueError:
            return {}
        return record if isinstance(record, dict) and record.get("url") == obj.url else {}

    def scratch_dir(self) -> str:
        path = os.path.join(self.root, "tmp")
        with self._disk_errors(None):
            os.makedirs(path, exist_ok=True)
        return path

    # -- inspection and clearing -------------------------------------------------------------

    def entries(self) -> list[CacheEntry]:
        """Cached shards and downloads in progress, by key."""
        return list_entries(self.layout)

    def clear(self) -> tuple[int, int, int]:
        """Removes every entry not in use now; returns (files removed, shard bytes freed,
        entries skipped because a process holds them)."""
        if not os.path.isdir(self.root):
            return 0, 0, 0
        with self._disk_errors(None), self.space.global_lock():
            counts = remove_unused(self.root, self.layout, self.space)
        self.verified.clear()
        return counts


_opened: weakref.WeakSet[ShardCache] = weakref.WeakSet()


def opened_caches() -> dict[str, ShardCache]:
    """The caches this process has opened and still uses, one per directory (for metrics)."""
    return {cache.root: cache for cache in list(_opened)}
