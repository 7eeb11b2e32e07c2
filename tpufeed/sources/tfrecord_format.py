"""TFRecord framing: the verified scan that finds every record, and an atomic writer.

A record is `uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)`,
all little-endian, masked_crc(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable
from typing import BinaryIO

import google_crc32c
import numpy as np

from tpufeed.errors import CorruptDataError, InvalidArgumentError

_HEADER = struct.Struct("<QI")  # length, masked crc of the 8 length bytes
_CRC = struct.Struct("<I")
_FRAMING = _HEADER.size + _CRC.size  # 16 bytes around every record's data
_SCAN_CHUNK = 16 << 20


def _masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _atomic_write(path: str, write: Callable[[BinaryIO], object], *, durable: bool) -> None:
    """Writes `path` through a temporary name in the same directory, then renames it.

    `durable` fsyncs before the rename; an index is a cache that is checked on load, so it skips
    that cost.
    """
    tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        with open(tmp, "xb") as f:
            write(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_tfrecords(path: str | os.PathLike, records: Iterable[bytes]) -> int:
    """Writes `records` as a TFRecord file (atomically: temp name, then rename); returns the count."""
    path = os.fspath(path)
    count = 0

    def write(f: BinaryIO) -> None:
        nonlocal count
        for record in records:
            if not isinstance(record, (bytes, bytearray, memoryview)):
                raise InvalidArgumentError(
                    f"{path}: record {count} is {type(record).__name__}, not bytes: {record!r:.80}")
            data = bytes(record)
            length = struct.pack("<Q", len(data))
            f.write(length)
            f.write(_CRC.pack(_masked_crc(length)))
            f.write(data)
            f.write(_CRC.pack(_masked_crc(data)))
            count += 1

    _atomic_write(path, write, durable=True)
    return count


def scan_records(fd: int, path: str, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Reads the whole file once, verifying every CRC; returns (data offsets, lengths) as uint64.

    Reads in 16 MiB chunks (more for a larger record); raises CorruptDataError on a bad CRC or a
    record cut off by the end of the file.
    """
    return _scan(lambda n, offset: os.pread(fd, n, offset), path, size)


def _scan(pread: Callable[[int, int], bytes], path: str,
          size: int) -> tuple[np.ndarray, np.ndarray]:
    offsets: list[int] = []
    lengths: list[int] = []
    buf = b""
    base = 0  # file offset of buf[0]
    pos = 0  # file offset of the next record
    while pos < size:
        record = len(offsets)
        if pos + _HEADER.size > size:
            raise _corrupt(path, record, pos, f"torn record: the file ends {size - pos} bytes "
                           f"into its {_HEADER.size}-byte header")
        if pos + _HEADER.size > base + len(buf):
            buf, base = pread(_SCAN_CHUNK, pos), pos
            if len(buf) < _HEADER.size:
                raise _corrupt(path, record, pos, "file shrank while its index was being built")
        rel = pos - base
        length, length_crc = _HEADER.unpack_from(buf, rel)
        if _masked_crc(buf[rel:rel + 8]) != length_crc:
            raise _corrupt(path, record, pos, "length CRC mismatch")
        end = pos + _FRAMING + length
        if end > size:
            raise _corrupt(path, record, pos, f"torn record: its length says {length} bytes of "
                           f"data but the file ends {end - size} bytes short")
        if end > base + len(buf):
            buf, base = pread(max(_SCAN_CHUNK, end - pos), pos), pos
            rel = 0
            if end > base + len(buf):
                raise _corrupt(path, record, pos, "file shrank while its index was being built")
        start = rel + _HEADER.size
        if _masked_crc(buf[start:start + length]) != _CRC.unpack_from(buf, start + length)[0]:
            raise _corrupt(path, record, pos, "data CRC mismatch")
        offsets.append(pos + _HEADER.size)
        lengths.append(length)
        pos = end
    return np.array(offsets, dtype=np.uint64), np.array(lengths, dtype=np.uint64)


def _corrupt(path: str, record: int, offset: int, what: str) -> CorruptDataError:
    return CorruptDataError(f"{path}: record {record} at byte offset {offset}: {what}",
                            path=path, record=record)
