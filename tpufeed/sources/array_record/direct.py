"""Direct reads of an ArrayRecord file through its record map (`record_map`): one `pread` of a
record's chunk, checked against the map's CRC32C, for the records stored whole; array_record's
own read for the others.

A span whose CRC32C does not match is read again by array_record: if it reads, the map is stale
(the file was rewritten after its map was written): the map is removed, with a warning, and the
file's reads go on without it; if not, the file is damaged and the error names the record.
Either way the read raises, and the caller reads the batch again through the checked path.
"""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Callable

import google_crc32c

from tpufeed.errors import CorruptDataError, TpufeedError
from tpufeed.sources.array_record.record_map import MAP_SUFFIX, RecordMap, load_map
from tpufeed.storage.opener import FileIdentity, open_regular

__all__ = ["MappedFile", "open_mapped"]

ReadRange = Callable[[int, int], list[bytes]]


class MappedFile:
    """A file's record map, with the file open for direct reads; `dropped` once the map was
    found stale (its reads then go through array_record)."""

    def __init__(self, path: str, records_map: RecordMap, fd: int):
        self.path = path
        self.map = records_map
        self.fd = fd
        self.dropped = False
        self._closes = weakref.finalize(self, os.close, fd)  # a dropped dataset's too

    def reader(self, read_range: ReadRange) -> Callable[[int], bytes]:
        """Reads record i: by the map, or by `read_range(i, i + 1)` (array_record's)."""
        fd, records_map = self.fd, self.map
        offsets, lengths = records_map.offsets, records_map.lengths
        starts, crcs = records_map.starts, records_map.crcs
        pread, crc = os.pread, google_crc32c.value

        def read(i: int) -> bytes:
            n = lengths[i]
            if not n:
                return read_range(i, i + 1)[0]
            span = pread(fd, n, offsets[i])
            if crc(span) != crcs[i]:
                raise self.mismatch(i, read_range)
            return span[starts[i] :]

        return read

    def mismatch(self, record: int, read_range: ReadRange) -> TpufeedError:
        """The error for a record whose span does not match the map: the file's damage (as
        array_record names it), or the map's staleness (the map is then dropped)."""
        try:
            read_range(record, record + 1)
        except Exception as e:  # noqa: BLE001 - array_record raises bare RuntimeErrors
            return CorruptDataError(
                f"{self.path} record {record} cannot be read: {e}", path=self.path, record=record
            )
        drop_map(self.path, f"does not match record {record}: the file was rewritten after it")
        self.dropped = True  # closed with the file: another thread may be in a read
        return TpufeedError(f"{self.path}: its record map was stale; the batch is read again")

    def close(self) -> None:
        self._closes()  # once


def open_mapped(path: str, count: int, pinned: FileIdentity, root: str | None) -> MappedFile | None:
    """The record map beside local file `path` (`count` records, the file `pinned` names),
    with the file open; None if it has none, or one that is not its own (removed, warned)."""
    try:
        found = load_map(path, count, pinned.size)
    except OSError as error:  # a map that cannot be read only costs speed: never a read
        warnings.warn(
            f"{path + MAP_SUFFIX}: the record map of {path} cannot be read ({error}); reads "
            "go on without it",
            stacklevel=3,
        )
        return None
    if isinstance(found, str):
        drop_map(path, f"is not this file's: {found}")
        return None
    if found is None:
        return None
    return MappedFile(path, found, open_regular(path, path, pinned, root))


def drop_map(path: str, problem: str) -> None:
    """Removes the record map of `path`, with a warning naming `problem`."""
    where = path + MAP_SUFFIX
    try:
        os.unlink(where)
        outcome = "removed; reads go on without it"
    except OSError as error:
        outcome = f"cannot be removed ({error}); reads go on without it"
    warnings.warn(f"{where}: the record map of {path} {problem}; {outcome}", stacklevel=3)
