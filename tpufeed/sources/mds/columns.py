"""MDS column encodings: the function that decodes one value of each, checked when the index is
read.

Columns decode as Streaming's reader gives them, except images: `bytes` -> bytes, `str` -> str,
`int` -> int, `int8`...`float64` -> numpy scalars, `ndarray[:dtype[:shape]]` -> numpy array (a
read-only view, as Streaming's), `json` -> the parsed value, `str_int`/`str_float`/`str_decimal`
-> int/float/Decimal; `jpeg`, `png` stay encoded bytes (and `list[jpeg]`, `list[png]`,
`jpeg_array` lists of them), to be decoded in workers by `tpufeed.transforms.image.DecodeImage`
(or its crop-decoding relatives), as every tpufeed image source does; `pil` (raw pixels) and
`list[pil]` -> uint8 arrays (height, width, channels), as `DecodeImage` gives. `pkl` is refused:
nothing in data is unpickled.

An encoding is outside bytes too: anything but an encoding MDS defines, or a fixed size that
does not match the encoding's own, is refused when the index is read, naming the column and
the value. What a value's bytes declare (an array's shape, a list's count) is checked against
the bytes there are before anything of that size is made.
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np

from tpufeed.errors import CorruptDataError, InvalidArgumentError

__all__ = ["decoder_for"]

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
_SHAPE = re.compile(r"[0-9]{1,18}(,[0-9]{1,18})*")  # ASCII digits, each dimension an int64
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


def decoder_for(encoding: Any, column: str, size: int | None, where: str) -> Callable[[bytes], Any]:
    """The function that decodes one value of a column of `encoding`, whose index gives it
    `size` bytes (None: each sample says); raises naming `where` (the index and shard) and
    the column if the encoding is not MDS's or `size` is not the one it takes."""
    if not isinstance(encoding, str):
        raise _bad(where, f"column {column!r} has encoding {encoding!r}, not a string")
    if encoding == "pkl":
        raise InvalidArgumentError(
            f"{where}: column {column!r} is 'pkl' (pickled objects); tpufeed unpickles nothing "
            "from data, as unpickling runs code: rewrite the column as ndarray, str or json"
        )
    name, colon, config = encoding.partition(":")
    if name == "ndarray" and (config or not colon):
        decoder, takes = _ndarray_decoder(config, column, where)
    elif encoding in _DECODERS:
        decoder, takes = _DECODERS[encoding], _FIXED.get(encoding)
    else:
        raise InvalidArgumentError(
            f"{where}: column {column!r} has encoding {encoding!r}, which MDS does not define "
            f"(known: ndarray[:dtype[:shape]], {', '.join(sorted(_DECODERS))})"
        )
    if size != takes:
        raise _bad(
            where,
            f"column {column!r} ({encoding}) has size {size!r} in the index, but its encoding "
            f"takes {'a size each sample gives' if takes is None else f'{takes} bytes'}",
        )
    return decoder


def _ndarray_decoder(
    config: str, column: str, where: str
) -> tuple[Callable[[bytes], np.ndarray], int | None]:
    """The decoder of `ndarray[:dtype[:shape]]`, and the fixed size it takes (dtype and shape
    both given), or None."""
    parts = config.split(":") if config else []
    if len(parts) > 2 or (parts and parts[0] not in _SCALARS):
        raise _bad(where, f"column {column!r}: ndarray encoding {config!r} is not MDS's")
    if len(parts) == 2 and not _SHAPE.fullmatch(parts[1]):
        raise _bad(where, f"column {column!r}: ndarray shape {parts[1]!r} is not MDS's")
    dtype = _SCALARS[parts[0]] if parts else None
    shape = tuple(int(d) for d in parts[1].split(",")) if len(parts) == 2 else None
    takes = None
    if dtype is not None and shape is not None:
        takes = dtype.itemsize * int(np.prod(shape, dtype=object))

    def decode(data: bytes) -> np.ndarray:
        position = 0
        kind = dtype
        if kind is None:
            kind = _SCALARS[_VALUE_DTYPES[data[0]]]
            position = 1
        dims = shape
        if dims is None:
            ndim, shape_code = data[position] >> 2, data[position] & 3
            dims = tuple(
                np.frombuffer(data, _SHAPE_DTYPES[shape_code], ndim, position + 1).tolist()
            )
            position += 1 + ndim * (1 << shape_code)
        return np.frombuffer(data, kind, offset=position).reshape(dims)

    return decode, takes


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
    # frombuffer refuses a count the bytes cannot hold before making anything of that size
    sizes = np.frombuffer(data, "<u4", count, start).tolist()
    position = start + 4 * count
    items: list[Any] = []
    for size in sizes:
        if position + size > len(data):
            raise ValueError(f"item {len(items)} of {count} ends past the value's end")
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
# The encodings of a fixed size (MDSWriter gives it as the column's size); the others' sizes
# are written in each sample.
_FIXED = {"int": 8, **{name: dtype.itemsize for name, dtype in _SCALARS.items()}}


def _bad(where: str, why: str) -> CorruptDataError:
    return CorruptDataError(f"{where}: {why}", path=where.split(" shard ")[0])
