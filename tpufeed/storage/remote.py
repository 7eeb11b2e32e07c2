"""An object in a store (gs://, s3://) as a record file sees it: read through the shard cache,
or by byte ranges.

`RemoteFile` is small and picklable (an object version and the cache settings), so a worker
process gets the same view as its parent; clients, pools and locks are made per process.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from tpufeed.storage.backends import stat
from tpufeed.storage.cache.holds import CopyHold
from tpufeed.storage.cache.shard_cache import ShardCache
from tpufeed.storage.cache.transfers import URGENT, read_ranges
from tpufeed.storage.objects import RemoteObject

__all__ = ["RemoteFile"]


@dataclass(frozen=True)
class RemoteFile:
    """One object version (gs://, s3://), and the shard cache its reads go through."""

    obj: RemoteObject
    cache: ShardCache

    @classmethod
    def open(cls, url: str, cache: ShardCache | None = None) -> RemoteFile:
        cache = cache or ShardCache()
        return cls(stat(url, cache.retry), cache)

    @property
    def url(self) -> str:
        return self.obj.url

    @property
    def size(self) -> int:
        return self.obj.size

    @property
    def cached(self) -> bool:
        """False when reads go straight to the store as byte ranges (a cache of 0 bytes)."""
        return self.cache.max_bytes > 0

    def pinned(self) -> AbstractContextManager[str]:
        """The local copy's path, fetched if needed and kept in place inside the `with`."""
        return self.cache.pinned(self.obj)

    def open_copy(self) -> int:
        """The local copy open for reading (call while pinned): checked to be the regular file
        the cache verified (see `ShardCache.open_copy`)."""
        return self.cache.open_copy(self.obj)

    def stamp(self) -> list[int] | None:
        """The local copy's stat stamp now (take it while pinned)."""
        return self.cache.stamp(self.obj)

    def hold(self, on_evicted: Callable[[], None] | None = None) -> CopyHold:
        """Keeps the local copy counted against the cache limit while it is open, even once
        evicted: take it while pinned, after opening the copy; close it after closing the copy.
        `on_evicted` closes both when the copy has been evicted (see `cache_holds`)."""
        return self.cache.hold(self.obj, on_evicted)

    def unchanged(self, opened: CopyHold | list[int] | None, mark: bool = True) -> bool:
        """Whether the local copy is still the one opened with this hold (or stamp)."""
        stamp = opened.stamp if isinstance(opened, CopyHold) else opened
        return self.cache.unchanged(self.obj, stamp, mark)

    def local_path(self) -> str:
        """Where the local copy is when there is one (it may be absent or evicted any time)."""
        return self.cache.data_path(self.obj)

    def read_ranges(
        self, ranges: Sequence[tuple[int, int]], priority: float = URGENT
    ) -> list[bytes]:
        """Bytes of each [start, end), as parallel ranged GETs (retried)."""
        return read_ranges(self.obj, ranges, self.cache.retry, priority)
