"""Writing ArrayRecord files atomically (used by tests, benchmarks and the Beam stage)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable

from array_record.python.array_record_module import ArrayRecordWriter

from tpufeed.errors import InvalidArgumentError, SourceError


def write_array_records(
    path: str | os.PathLike, records: Iterable[bytes], options: str = "group_size:1"
) -> int:
    """Writes `records` to a new ArrayRecord file at `path`, atomically; returns their count.

    The file appears under its name only once complete (written under a temporary name in the
    same directory, then renamed). `group_size:1` gives the fastest random access.

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
    try:
        for count, record in enumerate(records, start=1):
            if isinstance(record, (bytearray, memoryview)):
                record = bytes(record)
            elif not isinstance(record, bytes):
                raise InvalidArgumentError(
                    f"record {count - 1} written to {path} is {type(record).__name__}, not bytes"
                )
            writer.write(record)
        writer.close()
        os.replace(tmp, path)
    except BaseException as e:
        if writer.is_open():
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - already failing; the original error is reported
                pass
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(e, RuntimeError):
            raise SourceError(f"cannot write {path}: {e}", path=path) from e
        raise
    return count
