"""Shared-memory batch slots: segments in /dev/shm created by workers, mapped by the parent.

A worker owns a small ring of slots and writes each batch into a free one. The parent maps a
segment the first time it is named and unlinks its file at once: from then on the memory lives
exactly as long as the two mappings, so a crash on either side cannot leak it. Names share a
prefix per iterator, and `SlotMaps.close` removes any file a dead worker left behind.
"""

from __future__ import annotations

import errno
import glob
import mmap
import os

from tpufeed.run.resources import SHM_DIR

_MIN_SIZE = 1 << 16


def segment_prefix(token: str) -> str:
    return f"tpufeed-{os.getpid()}-{token}"


class WorkerSlots:
    """The worker's side: a ring of `count` segments, grown on demand."""

    def __init__(self, prefix: str, count: int):
        self._prefix = prefix
        self._maps: list[mmap.mmap | None] = [None] * count
        self._names: list[str | None] = [None] * count
        self._free = list(range(count))[::-1]  # taken from the end: the last freed, still warm
        self._created: list[str] = []

    @property
    def has_free(self) -> bool:
        return bool(self._free)

    def acquire(self, nbytes: int) -> tuple[int, memoryview, str | None]:
        """A free slot of at least `nbytes`: (index, buffer, new segment name or None)."""
        index = self._free.pop()
        current = self._maps[index]
        if current is not None and len(current) >= nbytes:
            return index, memoryview(current), None
        size = max(_MIN_SIZE, nbytes + nbytes // 4)
        name = f"{self._prefix}-{len(self._created)}"
        path = os.path.join(SHM_DIR, name)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            self._created.append(path)
            try:
                os.ftruncate(fd, size)
                _allocate(fd, size, path)
                segment = mmap.mmap(fd, size)
            finally:
                os.close(fd)
        except BaseException:
            self._free.append(index)  # still free: the caller may send its answer another way
            raise
        if current is not None:
            current.close()
        self._maps[index], self._names[index] = segment, name
        return index, memoryview(segment), name

    def release(self, index: int) -> None:
        self._free.append(index)

    def unlink_all(self) -> None:
        """Removes every file this worker created that the parent has not unlinked yet."""
        for path in self._created:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def _allocate(fd: int, size: int, path: str) -> None:
    """Reserves the segment's memory now: a full tmpfs then fails here, with a message, rather
    than killing the worker with SIGBUS when it writes into a sparse mapping."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
            raise
        os.unlink(path)
        free = os.statvfs(SHM_DIR)
        from tpufeed.errors import WorkerError

        raise WorkerError(
            f"no room in {SHM_DIR} for a {size:,}-byte batch slot ({free.f_bavail * free.f_frsize:,} "
            f"bytes free of {free.f_blocks * free.f_frsize:,}): workers hand batches over in shared "
            f"memory. Give {SHM_DIR} more room (Docker: --shm-size=8g), or use smaller batches, "
            "fewer workers or less prefetch."
        ) from None


class SlotMaps:
    """The parent's side: maps segments by name, unlinking each file as soon as it is mapped."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self._maps: dict[tuple[int, int], mmap.mmap] = {}

    def buffer(self, worker: int, slot: int, new_name: str | None) -> mmap.mmap:
        key = (worker, slot)
        if new_name is not None:
            path = os.path.join(SHM_DIR, new_name)
            fd = os.open(path, os.O_RDWR)
            try:
                segment = mmap.mmap(fd, os.fstat(fd).st_size)
            finally:
                os.close(fd)
            os.unlink(path)
            old = self._maps.pop(key, None)
            if old is not None:
                old.close()
            self._maps[key] = segment
        return self._maps[key]

    def close(self) -> None:
        for segment in self._maps.values():
            try:
                segment.close()
            except BufferError:  # a view is still alive somewhere; the mapping dies with it
                pass
        self._maps.clear()
        for path in glob.glob(os.path.join(SHM_DIR, glob.escape(self.prefix) + "-*")):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
