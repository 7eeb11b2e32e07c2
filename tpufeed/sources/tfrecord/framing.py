"""TFRecord framing, the one implementation: the verified scan that finds every record (for
random access), a verified stream reader (for one pass, as the build reads its inputs), and an
atomic writer.

A record is `uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)`,
all little-endian, masked_crc(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

import google_crc32c
import numpy as np

from tpufeed.errors import CorruptDataError, InvalidArgumentError

_HEADER = struct.Struct("<QI")  # length, masked crc of the 8 length bytes
_CRC = struct.Struct("<I")
_FRAMING = _HEADER.size + _CRC.size  # 16 bytes around every record's data
_SCAN_CHUNK = 16 << 20
_STREAM_PIECE = 1 << 20  # a stream's record is read in pieces: a declared length is not trusted


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
                    f"{path}: record {count} is {type(record).__name__}, not bytes: {record!r:.80}"
                )
            data = bytes(record)
            length = struct.pack("<Q", len(data))
            f.write(length)
            f.write(_CRC.pack(_masked_crc(length)))
            f.write(data)
            f.write(_CRC.pack(_masked_crc(data)))
            count += 1

    _atomic_write(path, write, durable=True)
    return count


def _read_exact(f: BinaryIO, n: int) -> bytes:
    """Up to `n` bytes of `f` (fewer only at its end), read in pieces of at most 1 MiB: what
    is held never exceeds the bytes the stream really has, whatever `n` a header declares."""
    parts, left = [], n
    while left:
        chunk = f.read(min(left, _STREAM_PIECE))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def read_stream(f: BinaryIO, path: str) -> Iterator[bytes]:
    """Every record of the TFRecord file open as `f`, in order, each CRC checked; damage raises
    CorruptDataError naming `path`, the record and its byte offset (nothing after it can be
    framed)."""
    index, offset = 0, 0
    while header := _read_exact(f, _HEADER.size):
        if len(header) < _HEADER.size:
            raise _corrupt(path, index, offset, "torn record header at the end of the file")
        length, length_crc = _HEADER.unpack(header)
        if _masked_crc(header[:8]) != length_crc:
            raise _corrupt(
                path, index, offset, "length CRC mismatch: not a TFRecord file, or corrupted"
            )
        body = _read_exact(f, length + _CRC.size)
        if len(body) < length + _CRC.size:
            raise _corrupt(
                path, index, offset, f"torn record: {length} bytes announced, the file ends first"
            )
        data = body[:length]
        if _masked_crc(data) != _CRC.unpack_from(body, length)[0]:
            raise _corrupt(path, index, offset, "data CRC mismatch")
        yield data
        index += 1
        offset += _FRAMING + length


# In an index, a record length of UNFRAMED marks the last position of a file whose framing
# breaks there (a bad length CRC, or a record cut off by the end of the file): nothing after it
# can be split into records, so it is one position that fails when read.
UNFRAMED = (1 << 64) - 1


def scan_records(fd: int, path: str, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Reads the whole file once and frames every record; returns (data offsets, lengths).

    Each length's CRC is checked here; each record's data CRC when the record is read, so a
    damaged record fails (and `ignore_errors` can skip it) then. Where the framing breaks, the
    rest of the file becomes one last position of length `UNFRAMED`, which fails when read;
    a file whose first header does not frame (no TFRecord file: JSON, CSV, another format)
    raises here, when it is opened.
    Reads in 16 MiB chunks (more for a larger record).
    """
    return _scan(lambda n, offset: os.pread(fd, n, offset), path, size)


def _scan(
    pread: Callable[[int, int], bytes], path: str, size: int
) -> tuple[np.ndarray, np.ndarray]:
    offsets: list[int] = []
    lengths: list[int] = []
    buf = b""
    base = 0  # file offset of buf[0]
    pos = 0  # file offset of the next record
    while pos < size:
        record = len(offsets)
        if pos + _HEADER.size > base + len(buf):
            buf, base = pread(_SCAN_CHUNK, pos), pos
            if len(buf) < min(_HEADER.size, size - pos):
                raise _corrupt(path, record, pos, "file shrank while its index was being built")
        rel = pos - base
        problem = framing_problem(buf[rel : rel + _HEADER.size], pos, size)
        if problem is not None:
            if record == 0:  # no record at all: not a TFRecord file, said when it is opened
                raise _corrupt(
                    path,
                    0,
                    0,
                    f"{problem}: not a TFRecord file, or its first header is damaged "
                    f"(it starts with {bytes(buf[:16])!r})",
                )
            offsets.append(pos + _HEADER.size)
            lengths.append(UNFRAMED)
            break
        length = _HEADER.unpack_from(buf, rel)[0]
        offsets.append(pos + _HEADER.size)
        lengths.append(length)
        pos += _FRAMING + length
    return np.array(offsets, dtype=np.uint64), np.array(lengths, dtype=np.uint64)


def framing_problem(header: bytes, pos: int, size: int) -> str | None:
    """Why the record whose header is `header` (read at `pos` of a `size`-byte file) cannot be
    framed, or None if it can."""
    if len(header) < _HEADER.size:
        return f"torn record: the file ends {size - pos} bytes into its {_HEADER.size}-byte header"
    length, length_crc = _HEADER.unpack(header)
    if _masked_crc(header[:8]) != length_crc:
        return "length CRC mismatch"
    end = pos + _FRAMING + length
    if end > size:
        return (
            f"torn record: its length says {length} bytes of data but the file ends "
            f"{end - size} bytes short"
        )
    return None


def unframed(path: str, record: int, header: bytes, pos: int, size: int) -> CorruptDataError:
    """The error of the position that stands for a file's unframeable rest."""
    why = framing_problem(header, pos, size) or "the file changed after its index was built"
    return _corrupt(
        path,
        record,
        pos,
        f"{why}; the {size - pos:,} bytes from here to the end "
        "cannot be split into records (ignore_errors counts them as one bad record)",
    )


def _corrupt(path: str, record: int, offset: int, what: str) -> CorruptDataError:
    return CorruptDataError(
        f"{path}: record {record} at byte offset {offset}: {what}", path=path, record=record
    )
