"""Which cached copies this process trusts without reading them, and the check that earns it.

A copy is checked against its object's size and CRC32C (`problem`) once, then sealed: a record
beside it keeps its stat stamp (inode, size, mtime, ctime), the boot it was made in, and the
object's size and CRC32C. A copy whose record still matches all of them is trusted as it is,
so a restarted job need not re-read a warm cache; any other copy is checked again. Each process
remembers the stamps it has trusted, so that a trusted copy costs one stat and no read.
"""

from __future__ import annotations

import os
from typing import Any

from tpufeed.errors import SourceError
from tpufeed.storage import cache_layout as files
from tpufeed.storage.cache_layout import BOOT, CacheLayout
from tpufeed.storage.objects import RemoteObject

__all__ = ["VerifiedCopies"]


class VerifiedCopies:
    """The verified copies of one cache directory, as this process knows them."""

    def __init__(self, layout: CacheLayout):
        self.layout = layout
        self._stamps: dict[str, list[int]] = {}  # key -> stamp this process has checked

    def __getstate__(self) -> dict[str, Any]:
        return {"layout": self.layout, "_stamps": {}}  # another process checks for itself

    def trusted(self, key: str, obj: RemoteObject, st: os.stat_result) -> bool:
        """Whether the copy of `obj` under `key`, of stat `st`, is the one verified last."""
        stamp = files.stamp(st)
        if self._stamps.get(key) == stamp:
            return True
        record = files.read_json(self.layout.record(key))
        if (
            record is not None
            and record.get("stamp") == stamp
            and record.get("boot") == BOOT
            and record.get("size") == obj.size
            and record.get("crc32c") == obj.crc32c
        ):
            self._stamps[key] = stamp
            return True
        return False

    @staticmethod
    def problem(obj: RemoteObject, path: str, size: int) -> str | None:
        """What is wrong with the `size` bytes at `path` as a copy of `obj`, or None."""
        if size != obj.size:
            return f"{size:,} bytes, the object has {obj.size:,}"
        if obj.crc32c is not None:
            try:
                crc = files.file_crc32c(path, links=False)
            except SourceError as error:  # not a regular file (a FIFO, a link put in its place)
                return str(error)
            if crc != obj.crc32c:
                return f"CRC32C {crc:08x}, the object's is {obj.crc32c:08x}"
        return None

    def seal(self, obj: RemoteObject, key: str) -> None:
        """Records the verified file's stamp (after the rename: a rename changes the ctime)."""
        stamp = files.stamp(os.stat(self.layout.data(key)))
        files.write_json(
            self.layout.record(key),
            {
                "url": obj.url,
                "generation": obj.generation,
                "size": obj.size,
                "crc32c": obj.crc32c,
                "stamp": stamp,
                "boot": BOOT,
            },
        )
        self._stamps[key] = stamp

    def forget(self, key: str) -> None:
        """Stops trusting the copy under `key` (it was found damaged)."""
        self._stamps.pop(key, None)

    def clear(self) -> None:
        self._stamps.clear()
