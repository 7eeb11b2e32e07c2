"""Filling a cache entry: room reserved, ranged GETs into a part file, checked, renamed, sealed.

Under the entry's exclusive lock (`ShardCache` takes it): a sound copy already there is kept
(checked first if it is not trusted), a damaged one removed; otherwise room is made within the
limit (`cache_space`), the object is downloaded into a full-size part file (`transfers`), read
back and checked against its size and CRC32C (once more on a mismatch), then renamed into place
under the global lock, so that a space scan sees it either as a part or as data, and sealed
(`cache_verified`).
"""

from __future__ import annotations

import fcntl
import logging
import os
import time

from tpufeed.errors import CorruptDataError
from tpufeed.observe import counts, timeline
from tpufeed.storage.cache import layout as files
from tpufeed.storage.cache.eviction import VictimChooser
from tpufeed.storage.cache.layout import CacheLayout
from tpufeed.storage.cache.space import CacheSpace
from tpufeed.storage.cache.transfers import URGENT, download
from tpufeed.storage.cache.verified import VerifiedCopies
from tpufeed.storage.derived import remove_dead_temporaries_once
from tpufeed.storage.objects import RemoteObject
from tpufeed.storage.retry import RetryPolicy

__all__ = ["CacheFiller"]

log = logging.getLogger("tpufeed.cache")


class CacheFiller:
    """Fills the entries of one cache directory, downloading with `retry` in `part_bytes` parts."""

    def __init__(
        self,
        layout: CacheLayout,
        space: CacheSpace,
        verified: VerifiedCopies,
        retry: RetryPolicy,
        part_bytes: int,
    ):
        self.layout, self.space, self.verified = layout, space, verified
        self.retry, self.part_bytes = retry, part_bytes

    def fill(
        self,
        obj: RemoteObject,
        key: str,
        fd: int,
        victims: VictimChooser,
        priority: float,
        wait: bool,
    ) -> str | None:
        """Under the entry's exclusive lock: 'cached' (sound) or 'fetched'; None: no room."""
        remove_dead_temporaries_once(self.layout.shards)  # records killed writers left
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if self.keep_if_sound(obj, key):
                return "cached"
            files.remove(self.layout.record(key))  # a record without its copy
            self._remove_abandoned_parts(key)
            part = self.space.reserve(obj, key, victims, wait)
            if part is None:
                return None
            try:
                started = time.perf_counter()
                self._download(obj, key, part, priority)
                counts.count("cache_bytes", obj.size)
                timeline.complete(
                    "cache download",
                    time.perf_counter() - started,
                    "cache",
                    {"url": obj.url, "bytes": obj.size, "urgent": priority == URGENT},
                )
                with self.space.global_lock():  # a scan must see it as a part or as data
                    os.rename(part, self.layout.data(key))
            except BaseException:
                files.remove(part)
                raise
            self.verified.seal(obj, key)
            return "fetched"
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _remove_abandoned_parts(self, key: str) -> None:
        """Deletes this entry's part files: with its lock held exclusively here, they can only
        be a killed downloader's. The space scan cannot tell (it sees this lock taken), and
        would count them against the limit for as long as this download runs."""
        prefix = f"{key}.part-"
        try:
            names = os.listdir(self.layout.shards)
        except FileNotFoundError:
            return
        for name in names:
            if name.startswith(prefix):
                log.info("%s: removing %s, a download its killed process left", key, name)
                files.remove(os.path.join(self.layout.shards, name))

    def keep_if_sound(self, obj: RemoteObject, key: str) -> bool:
        """Under the exclusive lock: True if a sound copy is there; a damaged one is removed."""
        data = self.layout.data(key)
        st = files.stat(data)
        if st is None:
            return False
        if self.verified.trusted(key, obj, st):
            return True
        problem = self.verified.problem(obj, data, st.st_size, key)
        if problem is None:
            self.verified.seal(obj, key)
            return True
        log.warning(
            "%s: its cached copy %s is damaged (%s); fetching it again", obj.url, data, problem
        )
        with self.space.global_lock():
            self.space.evict(key)
        self.verified.forget(key)
        return False

    def _download(self, obj: RemoteObject, key: str, part: str, priority: float) -> None:
        problem = None
        for attempt in range(2):  # bytes that fail the check are fetched once more
            out = os.open(part, os.O_RDWR | os.O_CLOEXEC)
            try:
                download(obj, out, priority, self.retry, self.part_bytes)
            finally:
                os.close(out)
            problem = self.verified.problem(obj, part, os.path.getsize(part), key)
            if problem is None:
                return
            log.warning(
                "%s: downloaded bytes are wrong (%s)%s",
                obj.url,
                problem,
                "; downloading again" if attempt == 0 else "",
            )
        raise CorruptDataError(
            f"{obj.url}: downloaded twice and both copies fail the check: {problem}", path=obj.url
        )
