"""Counting a gs:// ArrayRecord file's records from its footer alone, by byte ranges.

An ArrayRecord file ends with a 64 KiB block holding the Riegeli *postscript*: an uncompressed
simple chunk whose records say where the *footer* (the index of chunks and record counts)
starts. Fetching the head, that block and the footer — a few hundred KiB, not the shard — and
placing them at their offsets in a sparse local file of the object's size gives array_record's
own reader all it reads at open, so it reports the count (and checks the footer's hashes).
"""

from __future__ import annotations

import os

__all__ = ["BLOCK_SIZE", "footer_offset", "read_varint", "sparse_copy"]

BLOCK_SIZE = 1 << 16
_BLOCK_HEADER = 24  # header hash, previous chunk, next chunk
_SIGNATURE_SIZE = 64  # a block header and the signature chunk's header open every file
_CHUNK_HEADER = 40  # header hash, data size, data hash, type + record count, decoded size
_SIMPLE_CHUNK = ord("r")
_NO_COMPRESSION = 0
_FOOTER_OFFSET_TAG = 0x08  # RiegeliPostscript field 1, varint


def footer_offset(last_block: bytes, size: int) -> int | None:
    """Where the footer starts, read from the file's last block; None if it is not as expected
    (then the caller falls back to reading the whole file)."""
    if len(last_block) != BLOCK_SIZE or size < 2 * BLOCK_SIZE:
        return None
    head = _BLOCK_HEADER
    data_size = int.from_bytes(last_block[head + 8 : head + 16], "little")
    if last_block[head + 24] != _SIMPLE_CHUNK:
        return None
    data = last_block[head + _CHUNK_HEADER : head + _CHUNK_HEADER + data_size]
    if len(data) != data_size or not data or data[0] != _NO_COMPRESSION:
        return None
    try:
        sizes_length, pos = read_varint(data, 1)
        first_size, _ = read_varint(data, pos)
        record = data[pos + sizes_length : pos + sizes_length + first_size]
        if not record or record[0] != _FOOTER_OFFSET_TAG:
            return None
        offset, _ = read_varint(record, 1)
    except IndexError:
        return None
    return offset if _SIGNATURE_SIZE <= offset <= size - BLOCK_SIZE else None


def sparse_copy(path: str, size: int, pieces: list[tuple[int, bytes]]) -> None:
    """Writes a `size`-byte file that holds only `pieces` (offset, bytes); the rest is holes."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, size)
        for offset, data in pieces:
            os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint64 at `data[pos:]` and the position after it; IndexError if it is cut or
    longer than ten bytes."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise IndexError("varint too long")
