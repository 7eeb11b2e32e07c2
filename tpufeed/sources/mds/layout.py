"""MosaicML Streaming's MDS format, read without Streaming: the index and a shard's layout.

A dataset folder holds `index.json`: `{"version": 2, "shards": [...]}`, each shard an object
naming its columns (`column_names`, `column_encodings`, `column_sizes`: a fixed byte size or
null), its `samples`, its file (`raw_data`: basename, bytes, hashes) and, when it is compressed
(`compression`: "zstd", "gz" or "bz2", with an optional ":level"), the compressed file
(`zip_data`). A shard file is `uint32 count | uint32 offsets[count + 1] | config JSON | samples`,
offsets absolute and little-endian; a sample is the uint32 sizes of its variable-size columns,
then each column's bytes in `column_names` order (`tpufeed.sources.mds.columns` decodes them).

Every field of the index and of a shard's header is outside bytes: a value that is not what
MDSWriter writes raises `CorruptDataError` naming the index, the shard, the field (the column)
and the value; a count is checked against the bytes there are before anything of its size is
read.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from tpufeed.errors import CorruptDataError, InvalidArgumentError
from tpufeed.sources.mds.columns import decoder_for
from tpufeed.storage.bounded import declared, parsing

__all__ = ["INDEX_NAME", "ShardInfo", "offset_table", "parse_index"]

INDEX_NAME = "index.json"
MAX_INDEX_BYTES = 256 << 20
COMPRESSIONS = {"zstd", "gz", "bz2"}  # Streaming's others (br, snappy) need libraries we lack
_COLUMN_KEYS = ("column_names", "column_encodings", "column_sizes")


class ShardInfo:
    """One shard entry of an index, checked: its columns, count, files and compression."""

    def __init__(self, entry: Any, where: str, prefix: str = ""):
        if not isinstance(entry, dict):
            raise _bad(where, f"a shard entry is {type(entry).__name__}, not an object")
        if entry.get("format") != "mds":
            raise _bad(
                where,
                f"shard format {entry.get('format')!r} is not 'mds' (Streaming's csv/tsv/json "
                "shards are not read); write the dataset with MDSWriter",
            )
        if entry.get("version") != 2:
            raise _bad(where, f"shard version {entry.get('version')!r}; only version 2 is read")
        self.where = where  # "<index> shard <i>": what errors about this entry name
        self.columns = _columns(entry, where)
        self.variable = sum(size is None for _, size, _ in self.columns)
        self.raw = _file_info(entry.get("raw_data"), "raw_data", where, prefix)
        self.samples = _count(entry.get("samples"), "samples", where)
        self.compression = entry.get("compression")
        self.algorithm = _algorithm(self.compression, where)
        self.zip = None
        if self.algorithm is not None:
            self.zip = _file_info(entry.get("zip_data"), "zip_data", where, prefix)

    @property
    def stored(self) -> dict[str, Any]:
        """The file the dataset folder holds for this shard: the compressed one if any."""
        return self.zip if self.zip is not None else self.raw

    def decode(self, data: bytes, path: str, record: int) -> dict[str, Any]:
        """The sample dict of a record's bytes; `CorruptDataError` naming the column if they do
        not split into this shard's columns, or a column does not decode."""
        try:
            sizes = iter(struct.unpack_from(f"<{self.variable}I", data) if self.variable else ())
        except struct.error:
            raise CorruptDataError(
                f"{path} record {record}: its {len(data)} bytes cannot hold the sizes of its "
                f"{self.variable} variable-size columns (the shard is damaged)",
                path=path,
                record=record,
            ) from None
        position = 4 * self.variable
        out = {}
        for name, fixed, decode in self.columns:
            end = position + (fixed if fixed is not None else next(sizes))
            if end > len(data):
                raise CorruptDataError(
                    f"{path} record {record}: column {name!r} ends at byte {end}, past the "
                    f"record's {len(data)} bytes (the shard is damaged)",
                    path=path,
                    record=record,
                )
            try:
                out[name] = decode(data[position:end])
            except Exception as error:
                raise CorruptDataError(
                    f"{path} record {record}: column {name!r} cannot be decoded: "
                    f"{type(error).__name__}: {error}",
                    path=path,
                    record=record,
                ) from error
            position = end
        if position != len(data):
            raise CorruptDataError(
                f"{path} record {record}: its columns take {position} of its {len(data)} bytes "
                "(the shard is damaged, or its index describes other columns)",
                path=path,
                record=record,
            )
        return out


def parse_index(data: bytes, where: str, prefix: str = "") -> list[ShardInfo]:
    """The shards of an `index.json`'s bytes; `prefix` is put before each basename (the folder
    of a sub-dataset's index, relative to the dataset root)."""
    try:
        index = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise _bad(where, f"not valid JSON: {error}") from None
    except ValueError as error:  # a number past Python's limit of digits
        raise _bad(where, f"not an MDS index: {error}") from None
    if not isinstance(index, dict) or not isinstance(index.get("shards"), list):
        raise _bad(where, 'not an MDS index: it needs {"version": 2, "shards": [...]}')
    if index.get("version") != 2:
        raise _bad(where, f"index version {index.get('version')!r}; only version 2 is read")
    shards = []
    for i, entry in enumerate(index["shards"]):
        with parsing(where, f"shard {i}"):  # a check missed above is still named
            shards.append(ShardInfo(entry, f"{where} shard {i}", prefix))
    return shards


def offset_table(fd: int, size: int, info: ShardInfo, path: str) -> np.ndarray:
    """A shard's record offsets (int64, count + 1 of them) from the file open at `fd`, whose
    first `size` bytes are the shard: checked against the index's count and that size."""
    head = os.pread(fd, 4, 0)
    (count,) = struct.unpack("<I", head) if len(head) == 4 else (-1,)
    if count != info.samples:
        raise CorruptDataError(
            f"{path}: the shard says it holds {count} samples, the index says {info.samples} "
            "(a damaged shard, or an index.json of another dataset)",
            path=path,
        )
    length = declared(4 * (count + 1), size - 4, path, "its offset table", 4)
    table = os.pread(fd, length, 4)
    offsets = np.frombuffer(table, "<u4").astype(np.int64)
    if offsets.size != count + 1 or offsets[0] < 4 * (count + 2) or offsets[-1] != size:
        raise CorruptDataError(
            f"{path}: its offset table does not fit its {size:,} bytes (the shard is damaged "
            "or truncated)",
            path=path,
        )
    bad = np.flatnonzero(np.diff(offsets) < 0)
    if bad.size:
        raise CorruptDataError(
            f"{path} record {int(bad[0])}: its offset table runs backwards there (the shard "
            "is damaged)",
            path=path,
            record=int(bad[0]),
        )
    return offsets


def _columns(entry: dict[str, Any], where: str) -> list[tuple[str, int | None, Callable]]:
    """(name, fixed size or None, decoder) of each column, in the order samples hold them."""
    names: Any = entry.get(_COLUMN_KEYS[0])
    encodings: Any = entry.get(_COLUMN_KEYS[1])
    sizes: Any = entry.get(_COLUMN_KEYS[2])
    if not all(isinstance(v, list) for v in (names, encodings, sizes)) or not (
        len(names) == len(encodings) == len(sizes)
    ):
        raise _bad(where, f"{', '.join(_COLUMN_KEYS)} must be lists of one length")
    bad_name = next((n for n in names if not isinstance(n, str) or not n), None)
    if bad_name is not None or len(set(names)) != len(names):
        raise _bad(where, f"column_names {names!r} must be distinct non-empty strings")
    columns = []
    for name, encoding, size in zip(names, encodings, sizes):
        fixed = _size(size, name, where)
        columns.append((name, fixed, decoder_for(encoding, name, fixed, where)))
    return columns


def _algorithm(compression: Any, where: str) -> str | None:
    """The decompressor a shard's `compression` (e.g. "zstd:7") names, None if it has none."""
    if compression is None:
        return None
    if not isinstance(compression, str):
        raise _bad(where, f"compression is {compression!r}, not a string")
    algorithm = compression.split(":")[0]
    if algorithm not in COMPRESSIONS:
        raise InvalidArgumentError(
            f"{where}: compression {compression!r} is not read; tpufeed reads "
            f"{sorted(COMPRESSIONS)} (rewrite the shards with one of them)"
        )
    return algorithm


def _size(size: Any, column: str, where: str) -> int | None:
    if size is None or (isinstance(size, int) and not isinstance(size, bool) and size >= 0):
        return size
    raise _bad(where, f"column {column!r} has size {size!r}, not null or a count of bytes")


def _count(value: Any, what: str, where: str, end: int = 1 << 32) -> int:
    """A count below `end`: a shard's header holds a uint32 count and uint32 offsets, so neither
    its samples nor a raw shard's bytes reach 2**32."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < end:
        return value
    raise _bad(where, f"{what} is {value!r}, not a count below 2**{end.bit_length() - 1}")


def _file_info(value: Any, what: str, where: str, prefix: str) -> dict[str, Any]:
    # a compressed file may be a little larger than its raw shard (incompressible bytes)
    end = 1 << (32 if what == "raw_data" else 40)
    if not isinstance(value, dict) or not isinstance(value.get("basename"), str):
        raise _bad(where, f"{what} is {value!r}, not an object with a basename")
    hashes = value.get("hashes") or {}
    if not isinstance(hashes, dict) or not all(isinstance(v, str) for v in hashes.values()):
        raise _bad(where, f"{what}.hashes is {hashes!r}, not an object of hex digests")
    return {
        "basename": prefix + value["basename"],
        "bytes": _count(value.get("bytes"), f"{what}.bytes", where, end),
        "hashes": hashes,
    }


def _bad(where: str, why: str) -> CorruptDataError:
    return CorruptDataError(f"{where}: {why}", path=where.split(" shard ")[0])
