"""Writing ArrayRecord files atomically (used by tests, benchmarks and the Beam stage)."""

from __future__ import annotations

import array
import contextlib
import logging
import os
import uuid
from collections.abc import Iterable

import google_crc32c
from array_record.python.array_record_module import ArrayRecordWriter

from tpufeed.errors import InvalidArgumentError, SourceError
from tpufeed.sources.array_record.record_map import MAP_SUFFIX, RecordMap, map_records, save_map

log = logging.getLogger("tpufeed")


def write_array_records(
    path: str | os.PathLike,
    records: Iterable[bytes],
    options: str = "group_size:1",
    record_map: bool = True,
) -> int:
    """Writes `records` to a new ArrayRecord file at `path`, atomically; returns their count.

    The file appears under its name only once complete (written under a temporary name, then
    renamed). `group_size:1` gives the fastest random access, and a record map beside the file
    (`tpufeed.sources.array_record.record_map`; `record_map=False`: none).

    >>> write_array_records("/tmp/x.array_record", [b"a", b"bc"])  # doctest: +SKIP
    2
    """
    path = os.fspath(path)
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        writer = ArrayRecordWriter(tmp, options)
    except ValueError as e:
        raise InvalidArgumentError(f"bad ArrayRecord writer options {options!r}: {e}") from e
    except Exception as e:
        raise SourceError(f"cannot create {tmp}: {e}", path=path) from e
    count = 0
    crcs = array.array("I") if record_map else None  # each record's, for the record map
    try:
        for count, record in enumerate(records, start=1):
            if isinstance(record, (bytearray, memoryview)):
                record = bytes(record)
            elif not isinstance(record, bytes):
                raise InvalidArgumentError(
                    f"record {count - 1} written to {path} is {type(record).__name__}, not bytes"
                )
            writer.write(record)
            if crcs is not None:
                crcs.append(google_crc32c.value(record))
        writer.close()
        _publish(tmp, path, crcs)
    except BaseException as e:
        if writer.is_open():
            with contextlib.suppress(Exception):  # already failing: the original is reported
                writer.close()
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(e, RuntimeError):
            raise SourceError(f"cannot write {path}: {e}", path=path) from e
        raise
    return count


def _publish(tmp: str, path: str, crcs: array.array | None) -> None:
    """Renames the whole file `tmp` to `path`, with its record map beside it where it has one
    (`crcs`: its records' CRC32Cs; None: no map)."""
    records_map = None
    try:
        records_map = None if crcs is None else _map_of(tmp, crcs)
    except Exception as e:  # noqa: BLE001 - the map only speeds reads: the file stands alone
        log.warning("%s: no record map made (%s); it is read without one", path, e)
    with contextlib.suppress(OSError):  # one left (a folder, say) is refused when read
        os.unlink(path + MAP_SUFFIX)  # an earlier file's: never beside this one
    os.replace(tmp, path)
    if records_map is not None:
        with contextlib.suppress(OSError):  # no room for it: the file reads without it
            save_map(path, records_map)


def _map_of(path: str, crcs: array.array) -> RecordMap | None:
    """The record map of the file just written at `path`; None where there is nothing to map."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return map_records(fd, os.fstat(fd).st_size, crcs)
    finally:
        os.close(fd)
