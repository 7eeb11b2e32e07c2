"""Which cached copies this process trusts without reading them, and the check that earns it.

A copy is checked against its object's size and CRC32C (`problem`) once, then sealed: a record
beside it keeps its stat stamp (inode, size, mtime, ctime), the boot it was made in, the
object's size and CRC32C, and the CRC32C of the copy's bytes (for an object its store keeps no
checksum for, the one later checks compare with). A copy whose record still matches all of them is trusted as it is,
so a restarted job need not re-read a warm cache; any other copy is checked again. Each process
remembers the stamps it has trusted, so that a trusted copy costs one stat and no read.
"""

from __future__ import annotations

import os
from typing import Any

from tpufeed.errors import SourceError
from tpufeed.storage.cache import layout as files
from tpufeed.storage.cache.layout import BOOT, CacheLayout
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

    def problem(self, obj: RemoteObject, path: str, size: int, key: str) -> str | None:
        """What is wrong with the `size` bytes at `path` as a copy of `obj` (kept under `key`),
        or None. Checked against the object's CRC32C; for an object its store keeps none for
        (S3 without a checksum), against the CRC32C of its first copy (`seal`), whose every
        byte came under the object's version (If-Match): a copy damaged since is found too."""
        if size != obj.size:
            return f"{size:,} bytes, the object has {obj.size:,}"
        expected = obj.crc32c if obj.crc32c is not None else self._first_crc32c(key, obj)
        if expected is None:  # the first copy of an object the store keeps no checksum for
            return None
        try:
            crc = files.file_crc32c(path, links=False)
        except SourceError as error:  # not a regular file (a FIFO, a link put in its place)
            return str(error)
        if crc != expected:
            whose = "the object's" if obj.crc32c is not None else "its first copy's"
            return f"CRC32C {crc:08x}, {whose} is {expected:08x}"
        return None

    def seal(self, obj: RemoteObject, key: str) -> None:
        """Records the verified file's stamp (after the rename: a rename changes the ctime),
        and the CRC32C of its bytes (read once here if the object has none)."""
        data = self.layout.data(key)
        content = obj.crc32c
        if content is None:
            content = self._first_crc32c(key, obj)
        if content is None:
            content = files.file_crc32c(data, links=False)
        stamp = files.stamp(os.stat(data))
        files.write_json(
            self.layout.record(key),
            {
                "url": obj.url,
                "generation": obj.generation,
                "version": obj.version,
                "size": obj.size,
                "crc32c": obj.crc32c,
                "content_crc32c": content,
                "stamp": stamp,
                "boot": BOOT,
            },
        )
        self._stamps[key] = stamp

    def _first_crc32c(self, key: str, obj: RemoteObject) -> int | None:
        """The CRC32C sealed for the first copy of this very version of `obj`, if any."""
        record = files.read_json(self.layout.record(key))
        if record is None or (record.get("url"), record.get("version")) != (obj.url, obj.version):
            return None
        crc = record.get("content_crc32c")
        return crc if isinstance(crc, int) and record.get("size") == obj.size else None

    def forget(self, key: str) -> None:
        """Stops trusting the copy under `key` (it was found damaged)."""
        self._stamps.pop(key, None)

    def clear(self) -> None:
        self._stamps.clear()
