"""MosaicML Streaming's MDS format, read without Streaming: the index, a shard's layout, columns.

A dataset folder holds `index.json`: `{"version": 2, "shards": [...]}`, each shard an object
naming its columns (`column_names`, `column_encodings`, `column_sizes`: a fixed byte size or
null), its `samples`, its file (`raw_data`: basename, bytes, hashes) and, when it is compressed
(`compression`: "zstd", "gz" or "bz2", with an optional ":level"), the compressed file
(`zip_data`). A shard file is `uint32 count | uint32 offsets[count + 1] | config JSON | samples`,
offsets absolute and little-endian; a sample is the uint32 sizes of its variable-size columns,
then each column's bytes in `column_names` order.

Columns decode as Streaming's reader gives them, except images: `bytes` -> bytes, `str` -> str,
`int` -> int, `int8`...`float64` -> numpy scalars, `ndarray[:dtype[:shape]]` -> numpy array (a
read-only view, as Streaming's), `json` -> the parsed value, `str_int`/`str_float`/`str_decimal`
-> int/float/Decimal; `jpeg`, `png` stay encoded bytes (and `list[jpeg]`, `list[png]`,
`jpeg_array` lists of them), to be decoded in workers by `tpufeed.transforms.image.DecodeImage`
(or its crop-decoding relatives), as every tpufeed image source does; `pil` (raw pixels) and
`list[pil]` -> uint8 arrays (height, width, channels), as `DecodeImage` gives. `pkl` is refused:
nothing in data is unpickled.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np

from tpufeed.errors import CorruptDataError, InvalidArgumentError

__all__ = ["INDEX_NAME", "ShardInfo", "decoder_for", "parse_index", "read_offsets"]

INDEX_NAME = "index.json"
MAX_INDEX_BYTES = 256 << 20
COMPRESSIONS = {"zstd", "gz", "bz2"}  # Streaming's others (br, snappy) need libraries we lack

_VALUE_DTYPES = {
    8: "uint8",
    9: "int8",
    16: "uint16",
    17: "int16",
    18: "float16",
    32: "uint32",
    33: "int32",
    34: "float32",
    64: "uint64",
    65: "int64",
    66: "float64",
}
_SHAPE_DTYPES = {0: "<u1", 1: "<u2", 2: "<u4", 3: "<u8"}
_SCALARS = {name: np.dtype(name).newbyteorder("<") for name in set(_VALUE_DTYPES.values())}
# Pixel layouts of the Pillow modes a `pil` column can hold: (dtype, channels).
_PIL_MODES = {
    "L": ("u1", 1),
    "P": ("u1", 1),
    "LA": ("u1", 2),
    "RGB": ("u1", 3),
    "YCbCr": ("u1", 3),
    "LAB": ("u1", 3),
    "HSV": ("u1", 3),
    "RGBA": ("u1", 4),
    "RGBX": ("u1", 4),
    "CMYK": ("u1", 4),
    "I": ("<i4", 1),
    "F": ("<f4", 1),
    "I;16": ("<u2", 1),
}


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
        names: Any = entry.get(_COLUMN_KEYS[0])
        encodings: Any = entry.get(_COLUMN_KEYS[1])
        sizes: Any = entry.get(_COLUMN_KEYS[2])
        if not all(isinstance(v, list) for v in (names, encodings, sizes)) or not (
            len(names) == len(encodings) == len(sizes)
        ):
            raise _bad(where, f"{', '.join(_COLUMN_KEYS)} must be lists of one length")
        self.columns: list[tuple[str, int | None, Callable[[bytes], Any]]] = [
            (name, _size(size, name, where), decoder_for(encoding, name, where))
            for name, encoding, size in zip(names, encodings, sizes)
        ]
        self.samples = _count(entry.get("samples"), "samples", where)
        self.raw = _file_info(entry.get("raw_data"), "raw_data", where, prefix)
        self.compression = entry.get("compression")
        zip_data = entry.get("zip_data")
        if self.compression is None:
            self.zip = None
        else:
            algo = str(self.compression).split(":")[0]
            if algo not in COMPRESSIONS:
                raise InvalidArgumentError(
                    f"{where}: compression {self.compression!r} is not read; tpufeed reads "
                    f"{sorted(COMPRESSIONS)} (rewrite the shards with one of them)"
                )
            self.zip = _file_info(zip_data, "zip_data", where, prefix)
        self.algorithm = None if self.compression is None else str(self.compression).split(":")[0]
        self.variable = sum(size is None for _, size, _ in self.columns)

    @property
    def stored(self) -> dict[str, Any]:
        """The file the dataset folder holds for this shard: the compressed one if any."""
        return self.zip if self.zip is not None else self.raw

    def decode(self, data: bytes, path: str, record: int) -> dict[str, Any]:
        """The sample dict of a record's bytes; `CorruptDataError` naming the column if they do
        not split into this shard's columns, or a column does not decode."""
        sizes = iter(struct.unpack_from(f"<{self.variable}I", data) if self.variable else ())
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


_COLUMN_KEYS = ("column_names", "column_encodings", "column_sizes")


def parse_index(data: bytes, where: str, prefix: str = "") -> list[ShardInfo]:
    """The shards of an `index.json`'s bytes; `prefix` is put before each basename (the folder
    of a sub-dataset's index, relative to the dataset root)."""
    try:
        index = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise _bad(where, f"not valid JSON: {error}") from None
    if not isinstance(index, dict) or not isinstance(index.get("shards"), list):
        raise _bad(where, 'not an MDS index: it needs {"version": 2, "shards": [...]}')
    if index.get("version") != 2:
        raise _bad(where, f"index version {index.get('version')!r}; only version 2 is read")
    return [
        ShardInfo(entry, f"{where} shard {i}", prefix) for i, entry in enumerate(index["shards"])
    ]


def read_offsets(head: bytes, table: bytes, info: ShardInfo, path: str, size: int) -> np.ndarray:
    """A shard's record offsets (int64, count + 1 of them) from its first 4 bytes (`head`) and
    its offset table, checked against the index's count and the file's `size`."""
    (count,) = struct.unpack("<I", head) if len(head) == 4 else (-1,)
    if count != info.samples:
        raise CorruptDataError(
            f"{path}: the shard says it holds {count} samples, the index says {info.samples} "
            "(a damaged shard, or an index.json of another dataset)",
            path=path,
        )
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


def decoder_for(encoding: Any, column: str, where: str) -> Callable[[bytes], Any]:
    """The function that decodes one value of a column of `encoding`."""
    if not isinstance(encoding, str):
        raise _bad(where, f"column {column!r} has encoding {encoding!r}, not a string")
    if encoding == "pkl":
        raise InvalidArgumentError(
            f"{where}: column {column!r} is 'pkl' (pickled objects); tpufeed unpickles nothing "
            "from data, as unpickling runs code: rewrite the column as ndarray, str or json"
        )
    name, _, config = encoding.partition(":")
    if name == "ndarray":
        return _ndarray_decoder(config, column, where)
    decoder = _DECODERS.get(encoding)
    if decoder is None:
        raise InvalidArgumentError(
            f"{where}: column {column!r} has encoding {encoding!r}, which MDS does not define "
            f"(known: ndarray[:dtype[:shape]], {', '.join(sorted(_DECODERS))})"
        )
    return decoder


def _ndarray_decoder(config: str, column: str, where: str) -> Callable[[bytes], Any]:
    parts = config.split(":") if config else []
    dtype = np.dtype(parts[0]).newbyteorder("<") if parts else None
    if parts and parts[0] not in _SCALARS or len(parts) > 2:
        raise _bad(where, f"column {column!r}: ndarray encoding {config!r} is not MDS's")
    shape = tuple(int(d) for d in parts[1].split(",")) if len(parts) == 2 else None

    def decode(data: bytes) -> np.ndarray:
        position = 0
        kind = dtype
        if kind is None:
            kind = np.dtype(_VALUE_DTYPES[data[0]]).newbyteorder("<")
            position = 1
        dims = shape
        if dims is None:
            ndim, shape_code = data[position] >> 2, data[position] & 3
            width = 1 << shape_code
            dims = tuple(
                np.frombuffer(data, _SHAPE_DTYPES[shape_code], ndim, position + 1).tolist()
            )
            position += 1 + ndim * width
        return np.frombuffer(data, kind, offset=position).reshape(dims)

    return decode


def _pil(data: bytes) -> np.ndarray:
    """Streaming's raw `pil` encoding, `uint32 width | height | len(mode) | mode | pixels`, as
    an array (height, width, channels)."""
    width, height, mode_size = struct.unpack_from("<3I", data)
    mode = bytes(data[12 : 12 + mode_size]).decode()
    if mode not in _PIL_MODES:
        raise ValueError(f"Pillow mode {mode!r} is not read (known: {sorted(_PIL_MODES)})")
    dtype, channels = _PIL_MODES[mode]
    pixels = np.frombuffer(data, dtype, offset=12 + mode_size)
    return pixels.reshape(height, width, channels)


def _list_of(decode: Callable[[bytes], Any]) -> Callable[[bytes], list[Any]]:
    """Streaming's list encodings: `uint32 0 | uint32 n | uint32 sizes[n] | items`."""

    def decode_list(data: bytes) -> list[Any]:
        (count,) = struct.unpack_from("<I", data, 4)
        return _split(data, count, 8, decode)

    return decode_list


def _jpeg_array(data: bytes) -> list[bytes]:
    """`jpeg_array`: `uint32 n | uint32 sizes[n] | images`."""
    (count,) = struct.unpack_from("<I", data)
    return _split(data, count, 4, bytes)


def _split(data: bytes, count: int, start: int, decode: Callable[[bytes], Any]) -> list[Any]:
    sizes = struct.unpack_from(f"<{count}I", data, start)
    position = start + 4 * count
    items = []
    for size in sizes:
        items.append(decode(data[position : position + size]))
        position += size
    if position != len(data):
        raise ValueError(f"its {count} items take {position} of its {len(data)} bytes")
    return items


def _scalar(dtype: np.dtype) -> Callable[[bytes], Any]:
    return lambda data: np.frombuffer(data, dtype)[0]


_DECODERS: dict[str, Callable[[bytes], Any]] = {
    "bytes": bytes,
    "str": lambda data: data.decode("utf-8"),
    "int": lambda data: int.from_bytes(data, "little", signed=True),
    "str_int": lambda data: int(data.decode("utf-8")),
    "str_float": lambda data: float(data.decode("utf-8")),
    "str_decimal": lambda data: Decimal(data.decode("utf-8")),
    "json": lambda data: json.loads(data.decode("utf-8")),
    "jpeg": bytes,
    "png": bytes,
    "pil": _pil,
    "list[jpeg]": _list_of(bytes),
    "list[png]": _list_of(bytes),
    "list[pil]": _list_of(_pil),
    "jpeg_array": _jpeg_array,
    "jpegarray": _jpeg_array,
    **{name: _scalar(dtype) for name, dtype in _SCALARS.items()},
}


def _size(size: Any, column: str, where: str) -> int | None:
    if size is None or (isinstance(size, int) and not isinstance(size, bool) and size >= 0):
        return size
    raise _bad(where, f"column {column!r} has size {size!r}, not null or a count of bytes")


def _count(value: Any, what: str, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise _bad(where, f"{what} is {value!r}, not a count")


def _file_info(value: Any, what: str, where: str, prefix: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("basename"), str):
        raise _bad(where, f"{what} is {value!r}, not an object with a basename")
    hashes = value.get("hashes") or {}
    if not isinstance(hashes, dict):
        raise _bad(where, f"{what}.hashes is {hashes!r}, not an object")
    return {
        "basename": prefix + value["basename"],
        "bytes": _count(value.get("bytes"), f"{what}.bytes", where),
        "hashes": hashes,
    }


def _bad(where: str, why: str) -> CorruptDataError:
    return CorruptDataError(f"{where}: {why}", path=where.split(" shard ")[0])
