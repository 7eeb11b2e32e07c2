"""Shared-memory batch slots: segments in /dev/shm created by workers, mapped by the parent.

A worker owns a small ring of slots and writes each batch into a free one. The parent maps a
segment the first time it is named and unlinks its file at once: from then on the memory lives
exactly as long as the two mappings, so a crash on either side cannot leak it. Names share a
prefix per iterator that starts with its owner (`segment_owners.py`), and `SlotMaps.close`
removes any file a dead worker left behind; the next run removes those of an iterator whose
process was killed with its workers.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import mmap
import os
from collections.abc import Callable

from tpufeed.run.resources import SHM_DIR
from tpufeed.run.workers.segment_owners import owner_tag

_MIN_SIZE = 1 << 16


def segment_prefix(token: str) -> str:
    """The start of the names of one iterator's segments: this process's `owner_tag`, then
    `token`."""
    return f"{owner_tag()}-{token}"


class NoRoom(Exception):
    """The worker gives up waiting for room in its share for one batch (see `acquire`)."""


class WorkerSlots:
    """The worker's side: a ring of `count` segments, grown on demand, together at most `share`
    bytes of shared memory (None: no limit; see `budget.py`)."""

    def __init__(
        self,
        prefix: str,
        count: int,
        share: int | None = None,
        too_big: Callable[[int], Exception] | None = None,
    ):
        self._prefix = prefix
        self._maps: list[mmap.mmap | None] = [None] * count
        self._names: list[str | None] = [None] * count
        self._free = list(range(count))[::-1]  # taken from the end: the last freed, still warm
        self._created: list[str] = []
        self.share, self._too_big = share, too_big
        self.live = 0  # bytes of the segments it made that the parent has not released yet

    def acquire(
        self,
        nbytes: int,
        wait: Callable[[], None],
        dropped: Callable[[list[int]], None],
        cramped: Callable[[int], bool] = lambda nbytes: False,
    ) -> tuple[int, memoryview, str | None]:
        """A free slot of at least `nbytes`: (index, buffer, new segment name or None).

        While no slot is free, or a new segment would take the worker past its share, it
        waits (`wait()`: one message from the parent, which may free slots or release
        segments); past its share it first gives back its idle segments (`dropped(slots)`
        tells the parent, whose release comes back as a message), then makes the segment
        without headroom if that fits. With nothing left to give back, `cramped(nbytes)` says
        whether to give up: True raises `NoRoom` (the batch goes another way).
        """
        if self.share is not None and nbytes > self.share and self._too_big is not None:
            raise self._too_big(nbytes)
        while True:
            index = self._pick(nbytes)
            if index is None:
                wait()
                continue
            current = self._maps[index]
            if current is not None and len(current) >= nbytes:
                self._free.remove(index)
                return index, memoryview(current), None
            size = self._room_for(nbytes, dropped)
            if size is not None:
                break
            if cramped(nbytes):
                raise NoRoom(nbytes)
            wait()
        self._free.remove(index)
        return index, *self._create(index, size)

    def _room_for(self, nbytes: int, dropped: Callable[[list[int]], None]) -> int | None:
        """The size of a new segment for `nbytes` that fits the share now: with a quarter of
        headroom for batches that grow, else exactly `nbytes` once no idle segment is left to
        give back; None if none fits yet (idle segments given back, if any: their release
        is waited for)."""
        size = max(_MIN_SIZE, nbytes + nbytes // 4)
        if self.share is None:
            return size
        size = max(nbytes, min(size, self.share))
        if self.live + size <= self.share:
            return size
        idle = [i for i in self._free if self._maps[i] is not None and self._close(i)]
        if idle:
            dropped(idle)
            return None
        return nbytes if self.live + nbytes <= self.share else None

    def _close(self, index: int) -> bool:
        """Unmaps the idle segment of `index`; False (kept) where a view of it is alive."""
        try:
            self._maps[index].close()  # type: ignore[union-attr]
        except BufferError:
            return False
        self._maps[index] = self._names[index] = None
        return True

    def _pick(self, nbytes: int) -> int | None:
        """The last freed slot whose segment holds `nbytes`, else the last freed; None if no
        slot is free."""
        for index in reversed(self._free):
            segment = self._maps[index]
            if segment is not None and len(segment) >= nbytes:
                return index
        return self._free[-1] if self._free else None

    def _create(self, index: int, size: int) -> tuple[memoryview, str]:
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
        self.live += size
        current = self._maps[index]
        if current is not None:  # the parent releases it when it maps the new one
            current.close()
        self._maps[index], self._names[index] = segment, name
        return memoryview(segment), name

    def release(self, index: int) -> None:
        self._free.append(index)

    def mappings(self) -> list[mmap.mmap]:
        """The segments mapped now."""
        return [segment for segment in self._maps if segment is not None]

    def released(self, nbytes: int) -> None:
        """The parent has unmapped `nbytes` of this worker's segments: they are gone."""
        self.live -= nbytes

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
    """The parent's side: maps segments by name, unlinking each file as soon as it is mapped,
    and counts the bytes it unmaps per worker for the workers' budgets (`take_released`)."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self._maps: dict[tuple[int, int], mmap.mmap] = {}
        self._released: dict[int, int] = {}

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
            self._unmap(worker, slot)
            self._maps[key] = segment
        return self._maps[key]

    def drop(self, worker: int, slots: list[int]) -> None:
        """Unmaps the segments of `slots`, which their worker has given back."""
        for slot in slots:
            self._unmap(worker, slot)

    def _unmap(self, worker: int, slot: int) -> None:
        old = self._maps.pop((worker, slot), None)
        if old is not None:
            self._released[worker] = self._released.get(worker, 0) + len(old)
            old.close()  # a slot is replaced or dropped only while free: nothing views it

    def mapped_bytes(self, worker: int | None = None) -> int:
        """Shared memory of `worker`'s segments (None: every worker's) mapped now (its slots in
        use or ready); read from any thread (a segment unmapped meanwhile counts as gone)."""
        total = 0
        for (owner, _), segment in list(self._maps.items()):
            if worker is None or owner == worker:
                with contextlib.suppress(ValueError):  # closed since the list was taken
                    total += len(segment)
        return total

    def take_released(self, worker: int) -> int:
        """Bytes of `worker`'s segments unmapped since the last call."""
        return self._released.pop(worker, 0)

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
