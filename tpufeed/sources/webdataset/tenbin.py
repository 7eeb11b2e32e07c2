"""WebDataset's tenbin fields (`.ten`, `.tb`): a list of numpy arrays, as
`webdataset.tenbin.decode_buffer` gives them, read within bounds.

A field is a run of chunks, each `~TenBin~` (8 bytes), its length (int64, little-endian) and
its bytes, padded to a multiple of 64. Chunks pair up: a header (int64s: the dtype's short name
and an 8-byte info string, both as text packed into an int64, the rank, then each dimension)
and the array's data. Every declared length and shape is checked against the bytes there
before anything is made, and arrays are views of the field's bytes (read-only, as
WebDataset's are). WebDataset writes `uint32` under a misspelt name it then cannot read back;
tpufeed reads `u4` as `uint32`.

>>> decode(encode([np.arange(3, dtype=np.int32)]))  # doctest: +SKIP
[array([0, 1, 2], dtype=int32)]
"""

from __future__ import annotations

import math
import struct

import numpy as np

__all__ = ["decode"]

_MAGIC = b"~TenBin~"
_LENGTH = struct.Struct("<q")
_DTYPES = {
    "f2": np.float16,
    "f4": np.float32,
    "f8": np.float64,
    "i1": np.int8,
    "i2": np.int16,
    "i4": np.int32,
    "i8": np.int64,
    "u1": np.uint8,
    "u2": np.uint16,
    "u4": np.uint32,
    "u8": np.uint64,
}
_MAX_RANK = 64


def decode(data: bytes) -> list[np.ndarray]:
    """The arrays of one tenbin field; raises `ValueError` naming what does not hold."""
    chunks = _chunks(data)
    if len(chunks) % 2:
        raise ValueError(f"{len(chunks)} chunks: a header without its array")
    return [_array(header, body) for header, body in zip(chunks[::2], chunks[1::2])]


def _chunks(data: bytes) -> list[memoryview]:
    view, at, found = memoryview(data), 0, []
    while at < len(data):
        if bytes(view[at : at + 8]) != _MAGIC:
            raise ValueError(f"no tenbin chunk at byte {at} (magic bytes mismatch)")
        if at + 16 > len(data):
            raise ValueError(f"the chunk at byte {at} is cut before its length")
        (length,) = _LENGTH.unpack_from(data, at + 8)
        start = at + 16
        if length < 0 or length > len(data) - start:
            raise ValueError(
                f"the chunk at byte {at} declares {length:,} bytes where "
                f"{len(data) - start:,} remain"
            )
        found.append(view[start : start + length])
        at = start + -(-length // 64) * 64  # padded to 64 bytes; always moves forward
    return found


def _text(value: int) -> str:
    return struct.pack("<q", value).decode("ascii").strip("\0")


def _array(header: memoryview, body: memoryview) -> np.ndarray:
    if len(header) % 8 or len(header) < 24:
        raise ValueError(f"an array header of {len(header)} bytes (int64s, at least 3)")
    words = np.frombuffer(header, "<i8")
    short, rank = _text(int(words[0])), int(words[2])
    if short not in _DTYPES:
        raise ValueError(f"an array of unknown type {short!r} (known: {', '.join(_DTYPES)})")
    if not 0 <= rank <= min(_MAX_RANK, len(words) - 3):
        raise ValueError(f"an array header of {len(words)} int64s declares rank {rank}")
    shape = tuple(int(d) for d in words[3 : 3 + rank])
    dtype = np.dtype(_DTYPES[short]).newbyteorder("<")
    if any(d < 0 for d in shape) or math.prod(shape) * dtype.itemsize > len(body):
        raise ValueError(
            f"an array of shape {shape} and type {dtype.name} needs more than the "
            f"{len(body):,} bytes of its chunk"
        )
    return np.frombuffer(body, dtype, math.prod(shape)).reshape(shape)
