"""The record map of an ArrayRecord file of one record per chunk: where each record's bytes lie
in the file, so that a read is one `pread` and one CRC32C, not a Riegeli chunk decode.

Riegeli keeps a chunk's data as given when it does not compress: stored uncompressed, or as a
zstd frame of one raw block, the record's bytes lie whole in the file. `write_array_records`
knows each record's CRC32C as it writes it; after the writer closes, `map_records` walks the
file's chunks and, for each record whose bytes lie whole inside one 64 KiB block, checks them
against that CRC32C and keeps its span: from the chunk's header to the record's last byte, and
the CRC32C of the whole span, header included (the header holds Riegeli's HighwayHash of the
chunk's data). Records that were compressed, or that cross a block header, are not in the map
(their span length is 0) and are read by array_record's reader.

The map is a derived file beside the data file (`<path>.ar.tpufeed-index`; globs of shards skip
it), written atomically with a CRC32C trailer (`tpufeed.storage.derived`). It is not keyed by
the file's identity: every read checks its span against the map's CRC32C, so a map that does
not match its file (a stale one, after the file was rewritten; a file damaged since) can never
give a wrong record. The reader (`tpufeed.sources.array_record.direct`) then asks array_record:
a record that reads there means the map is stale (it is removed, with a warning); one that does
not is the file's damage, raised by name.

Payload: a 32-byte head (magic, record count, file size, reserved), then per record a uint64
span offset, and uint32 span length, record offset within the span and span CRC32C, each as
one little-endian array.
"""

from __future__ import annotations

import array
import os
import struct
import sys
from typing import BinaryIO

import google_crc32c

from tpufeed.storage.array_record_footer import BLOCK_SIZE, read_varint
from tpufeed.storage.derived import read_derived, remove_dead_temporaries_once, write_derived

__all__ = ["MAP_SUFFIX", "RecordMap", "load_map", "map_records", "save_map"]

MAP_SUFFIX = ".ar.tpufeed-index"  # ends in ".tpufeed-index": globs of shards skip it
_HEAD = struct.Struct("<8sQQ8x")
_MAGIC = b"TPFARM\x00\x01"
_BLOCK = BLOCK_SIZE
_BLOCK_HEADER = 24
_USABLE = _BLOCK - _BLOCK_HEADER
_CHUNK_HEADER = struct.Struct("<QQQQQ")  # hash, data size, data hash, type | records << 8, decoded
_RECORD_CHUNKS = (0x72, 0x74)  # simple, transposed
_SIMPLE = 0x72
_ZSTD = 0x7A
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_FCS_SIZES = (0, 2, 4, 8)
_DICT_SIZES = (0, 1, 2, 4)
_READ_PIECE = 1 << 20


class RecordMap:
    """A map: per record, the span's offset and length (0: not in the map), where the record
    starts inside it, and the span's CRC32C, as arrays. `count` and `size` are the file's."""

    def __init__(
        self,
        count: int,
        size: int,
        offsets: array.array,
        lengths: array.array,
        starts: array.array,
        crcs: array.array,
    ):
        self.count = count
        self.size = size
        self.offsets = offsets
        self.lengths = lengths
        self.starts = starts
        self.crcs = crcs


def _with_overhead(pos: int, size: int) -> int:
    """The file position `size` bytes of chunk after `pos`, block headers counted."""
    return pos + size + (size + (pos + _USABLE - 1) % _BLOCK) // _USABLE * _BLOCK_HEADER


def _possible_boundary(pos: int) -> int:
    """`pos`, moved past a block header it would end in or just after."""
    remaining = _BLOCK - 1 - (pos + _BLOCK - 1) % _BLOCK
    return pos + max(remaining - (_USABLE - 1), 0)


def _logical(raw: bytes, begin: int) -> bytes:
    """`raw` read from file position `begin`, without the block headers inside it."""
    pieces = []
    pos, i = begin, 0
    while i < len(raw):
        if pos % _BLOCK == 0:
            i += _BLOCK_HEADER
            pos += _BLOCK_HEADER
            continue
        take = min(len(raw) - i, _BLOCK - pos % _BLOCK)
        pieces.append(raw[i : i + take])
        i += take
        pos += take
    return b"".join(pieces)


def _record_at(data: bytes, at: int, end: int, decoded: int) -> int | None:
    """Where a simple chunk's one record lies whole in its data `data[at:end]`, or None where
    it was compressed (or is laid out in a way this walk does not know)."""
    compression = data[at]
    sizes, at = read_varint(data, at + 1)
    at += sizes  # the compressed record sizes: one size, the record's, which `decoded` gives
    if compression == 0:
        return at if end - at == decoded else None
    if compression != _ZSTD:
        return None
    _, at = read_varint(data, at)  # the decompressed size of the values
    if data[at : at + 4] != _ZSTD_MAGIC:
        return None
    descriptor = data[at + 4]
    single_segment = descriptor >> 5 & 1
    fcs = _FCS_SIZES[descriptor >> 6] or single_segment
    at += 5 + (not single_segment) + _DICT_SIZES[descriptor & 3] + fcs
    block = int.from_bytes(data[at : at + 3], "little")
    last, kind, size = block & 1, block >> 1 & 3, block >> 3
    at += 3
    if not last or kind != 0 or size != decoded:
        return None  # compressed, or more than one block
    checksum = 4 * (descriptor >> 2 & 1)
    return at if end - at - checksum == decoded else None


def _span(data: bytes, at: int, end: int, decoded: int, crc: int) -> tuple[int, int, int] | None:
    """(span length, record start, span CRC32C) of the chunk at `data[at:end]` (its header and
    data, no block header inside), if its record lies whole in it with CRC32C `crc`."""
    start = _record_at(data, at + _CHUNK_HEADER.size, end, decoded)
    if start is None:
        return None
    record = data[start : start + decoded]
    if google_crc32c.value(record) != crc:
        return None
    span = google_crc32c.extend(google_crc32c.value(data[at:start]), record)
    return start + decoded - at, start - at, span


def map_records(fd: int, size: int, crcs: array.array) -> RecordMap | None:
    """The map of the file open as `fd` (`size` bytes), whose records had the CRC32Cs `crcs`
    when written; None if no record's bytes lie whole in it, or the file's chunks are not one
    record each (nothing to map). Never raises on the file's contents."""
    count = len(crcs)
    offsets = array.array("Q", bytes(8 * count))
    lengths = array.array("I", bytes(4 * count))
    starts = array.array("I", bytes(4 * count))
    spans = array.array("I", bytes(4 * count))
    piece_at, piece = 0, b""
    pos, record = 0, 0
    try:
        while record < count and pos < size:
            header_end = _with_overhead(pos, _CHUNK_HEADER.size)
            if header_end > piece_at + len(piece):  # the file in 1 MiB pieces, read once
                piece_at, piece = pos, os.pread(fd, max(header_end - pos, _READ_PIECE), pos)
            if pos % _BLOCK and header_end - pos == _CHUNK_HEADER.size:
                header = _CHUNK_HEADER.unpack_from(piece, pos - piece_at)
            else:
                header = _CHUNK_HEADER.unpack(
                    _logical(piece[pos - piece_at : header_end - piece_at], pos)
                )
            _, data_size, _, kind, decoded = header
            chunk_type, records = kind & 0xFF, kind >> 8
            data_end = _with_overhead(pos, _CHUNK_HEADER.size + data_size)
            end = max(data_end, _possible_boundary(pos + records))
            if end <= pos or end > size:
                return None
            if chunk_type in _RECORD_CHUNKS and records:
                if records != 1:
                    return None  # several records a chunk: array_record decodes them
                if (
                    chunk_type == _SIMPLE
                    and pos % _BLOCK
                    and pos // _BLOCK == (data_end - 1) // _BLOCK
                ):
                    if data_end > piece_at + len(piece):
                        piece_at, piece = pos, os.pread(fd, max(data_end - pos, _READ_PIECE), pos)
                    found = _span(piece, pos - piece_at, data_end - piece_at, decoded, crcs[record])
                    if found is not None:
                        offsets[record] = pos
                        lengths[record], starts[record], spans[record] = found
                record += 1
            pos = end
    except (IndexError, struct.error, OSError, ValueError, OverflowError):
        return None
    if record != count or not any(lengths):
        return None
    return RecordMap(count, size, offsets, lengths, starts, spans)


def save_map(path: str, records: RecordMap) -> None:
    """Writes `records` as the map of data file `path`, atomically (little-endian hosts only:
    the map's columns are written as they lie in memory)."""
    if sys.byteorder != "little":  # pragma: no cover - every host tpufeed runs on
        return
    remove_dead_temporaries_once(os.path.dirname(path) or ".")  # a killed writer's

    def write(out: BinaryIO) -> None:
        out.write(_HEAD.pack(_MAGIC, records.count, records.size))
        for column in (records.offsets, records.lengths, records.starts, records.crcs):
            out.write(column.tobytes())

    write_derived(path + MAP_SUFFIX, write)


def load_map(path: str, count: int, size: int) -> RecordMap | None | str:
    """The map beside data file `path` of `count` records and `size` bytes, read into memory
    (20 bytes a record; not memory-mapped: a map file cut in place under a mapping would kill
    the process): None if there is none (or it was damaged: removed, with a warning), or a str
    saying why it is not this file's (a stale map: the caller removes it)."""
    data = read_derived(path + MAP_SUFFIX, f"the record map of {path}", remade=False)
    if data is None:
        return None
    if len(data) < _HEAD.size:
        return "it is shorter than its head"
    magic, mapped_count, mapped_size = _HEAD.unpack_from(data)
    if magic != _MAGIC:
        return "it is of another version of tpufeed"
    if (mapped_count, mapped_size) != (count, size) or len(data) != _HEAD.size + 20 * count:
        return (
            f"it maps {mapped_count:,} records of a {mapped_size:,}-byte file; the file has "
            f"{count:,} records and {size:,} bytes"
        )
    columns = []
    at = _HEAD.size
    for code, width in (("Q", 8), ("I", 4), ("I", 4), ("I", 4)):
        column = array.array(code, data[at : at + width * count])
        if sys.byteorder != "little":  # pragma: no cover - every host tpufeed runs on
            column.byteswap()
        columns.append(column)
        at += width * count
    return RecordMap(count, size, *columns)
