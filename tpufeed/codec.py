"""A safe, versioned binary encoding of dict records; decoding returns zero-copy numpy views.

Values may be numpy arrays (bool, int8..int64, uint8..uint64, float16/32/64, complex64/128; any
shape) or numpy scalars (decoded as 0-d arrays), and `bytes`, `str`, `int` (int64 range),
`float`, `bool` (decoded as the same Python type). Nothing is pickled or executed; every length
read from the data is checked against the bytes that remain before anything is allocated, and
malformed input of any kind raises `CodecError` naming the byte offset and key.

Layout (all integers little-endian; offsets are from the start of the record):

    =========  ==================================================================
    header     magic b"TPFD" | version u8 | 3 zero bytes | entry count u32
    entry      key length u16 | tag u8 | key (UTF-8) | value
    tag 0      bool: u8, 0 or 1
    tag 1      int: i64
    tag 2      float: f64
    tag 3      bytes: length u64 | payload
    tag 4      str: length u64 | UTF-8 payload
    tag 5      array: dtype code u8 | ndim u8 (<= 32) | ndim x dim u64 |
               zero padding to a multiple of the itemsize | payload, C order
               (a bool payload holds bytes 0 and 1 only)
    =========  ==================================================================

Dtype codes index `bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16,
float32, float64, complex64, complex128`; payloads are little-endian (big-endian input is
converted). Decoded arrays view the input buffer when the payload's address is aligned for its
dtype -- always the case for a `bytes` object, whose data CPython aligns to 16 bytes -- and
are copied otherwise (e.g. a memoryview slice starting at an odd address). Views share the
input's writability: read-only for `bytes`, writable for a `bytearray`.

>>> decode(encode({"x": np.arange(3, dtype=np.int32), "label": 7}))["label"]
7
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np

from tpufeed.errors import CodecError

__all__ = ["FORMAT_VERSION", "decode", "encode"]

FORMAT_VERSION = 1
_MAGIC = b"TPFD"
_EXPECTED_HEADER = (_MAGIC, FORMAT_VERSION, b"\0\0\0")  # magic, version, reserved
_HEADER = struct.Struct("<4sB3sI")
_ENTRY = struct.Struct("<HB")
_ARRAY = struct.Struct("<BB")
_U8 = struct.Struct("<B")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_U64 = struct.Struct("<Q")
_MAX_NDIM = 32
_DIMS = [struct.Struct(f"<{n}Q") for n in range(_MAX_NDIM + 1)]
_MIN_ENTRY = _ENTRY.size + 1  # empty key and a bool
_MAX_NBYTES = 2**63 - 1
_ZEROS = bytes(16)
_BOOL, _INT, _FLOAT, _BYTES, _STR, _ARR = range(6)
_BOOL_CODE = 0  # the dtype code of bool arrays: the one dtype with bytes it cannot hold
_SMALL_BOOLS = 2048  # bool payloads up to this many bytes are checked with bytes.translate
_TAG_OF_TYPE = {np.ndarray: _ARR, bool: _BOOL, int: _INT, float: _FLOAT, bytes: _BYTES, str: _STR}
_DTYPES = tuple(
    np.dtype(name).newbyteorder("<")
    for name in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
)
_DTYPE_CODE = {dtype: code for code, dtype in enumerate(_DTYPES)}


def _value_tag(key: str, value: object) -> int:
    """The tag of a value whose type is a subclass of a supported one (or unsupported)."""
    if isinstance(value, (np.ndarray, np.generic)):  # before float: np.float64 is a float
        return _ARR
    for kind, tag in ((bool, _BOOL), (int, _INT), (float, _FLOAT), (bytes, _BYTES), (str, _STR)):
        if isinstance(value, kind):
            return tag
    raise CodecError(
        f"record key {key!r}: values of type {type(value).__name__} cannot be "
        "encoded (use a numpy array, bytes, str, int, float or bool)"
    )


def _array_parts(key: str, value: object, pos: int) -> tuple[list, int]:
    """Header, shape, padding and payload of an array value starting at byte `pos`; its end."""
    arr = np.asarray(value)
    code = _DTYPE_CODE.get(arr.dtype)
    if code is None:
        if arr.dtype.kind in "biufc" and arr.dtype.newbyteorder("<") in _DTYPE_CODE:
            arr = arr.astype(arr.dtype.newbyteorder("<"))
            code = _DTYPE_CODE[arr.dtype]
        else:
            raise CodecError(
                f"record key {key!r}: arrays of dtype {arr.dtype} cannot be encoded "
                "(only bool, integer, float and complex dtypes)"
            )
    if arr.ndim > _MAX_NDIM:
        raise CodecError(
            f"record key {key!r}: array has {arr.ndim} dimensions, at most "
            f"{_MAX_NDIM} can be encoded"
        )
    if not arr.flags.c_contiguous:
        arr = np.ascontiguousarray(arr)
    if code == _BOOL_CODE and arr.size and int(arr.view(np.uint8).max()) > 1:
        at = int(np.flatnonzero(arr.view(np.uint8).ravel() > 1)[0])
        raise CodecError(
            f"record key {key!r}: bool array holds byte {arr.view(np.uint8).flat[at]:#04x} "
            f"at element {at} (a view of other bytes as bool?); numpy prints it as True, "
            "but JAX and astype see the byte: make the array with `!= 0`"
        )
    pos += _ARRAY.size + 8 * arr.ndim
    pad = -pos % arr.itemsize
    parts = [_ARRAY.pack(code, arr.ndim), _DIMS[arr.ndim].pack(*arr.shape), _ZEROS[:pad], arr.data]
    return parts, pos + pad + arr.nbytes


def encode(record: dict[str, Any]) -> bytes:
    """The bytes of `record`, a dict from str to supported values (see the module docstring)."""
    if not isinstance(record, dict):
        raise CodecError(f"a record must be a dict, got {type(record).__name__}")
    parts: list = [_HEADER.pack(_MAGIC, FORMAT_VERSION, b"\0\0\0", len(record))]
    pos = _HEADER.size
    for key, value in record.items():
        if not isinstance(key, str):
            raise CodecError(f"record key {key!r} is a {type(key).__name__}; keys must be str")
        try:
            kb = key.encode()
        except UnicodeEncodeError as e:
            raise CodecError(f"record key {key!r} cannot be encoded as UTF-8: {e}") from None
        if len(kb) > 0xFFFF:
            raise CodecError(f"record key {key[:40]!r}... is {len(kb)} bytes, at most 65535")
        tag = _TAG_OF_TYPE.get(type(value))
        if tag is None:
            tag = _value_tag(key, value)
        parts += (_ENTRY.pack(len(kb), tag), kb)
        pos += _ENTRY.size + len(kb)
        if tag == _ARR:
            new, pos = _array_parts(key, value, pos)
            parts += new
        elif tag == _INT:
            if not -(2**63) <= value < 2**63:
                raise CodecError(f"record key {key!r}: int {value} is outside the int64 range")
            parts.append(_I64.pack(value))
            pos += 8
        elif tag == _BOOL:
            parts.append(b"\1" if value else b"\0")
            pos += 1
        elif tag == _FLOAT:
            parts.append(_F64.pack(value))
            pos += 8
        else:
            if tag == _STR:
                try:
                    value = value.encode()
                except UnicodeEncodeError as e:
                    raise CodecError(
                        f"record key {key!r}: str value is not valid UTF-8: {e}"
                    ) from None
            parts += (_U64.pack(len(value)), value)
            pos += 8 + len(value)
    return b"".join(parts)


def _decode_array(mv: memoryview, pos: int, key: str) -> tuple[np.ndarray, int]:
    end = mv.nbytes
    if pos + _ARRAY.size > end:
        raise CodecError(f"truncated array header of key {key!r} at byte {pos}")
    code, ndim = _ARRAY.unpack_from(mv, pos)
    if code >= len(_DTYPES):
        raise CodecError(f"unknown dtype code {code} of key {key!r} at byte {pos}")
    if ndim > _MAX_NDIM:
        raise CodecError(
            f"array of key {key!r} claims {ndim} dimensions at byte {pos + 1}, at most {_MAX_NDIM}"
        )
    pos += _ARRAY.size
    dims = _DIMS[ndim]
    if pos + dims.size > end:
        raise CodecError(f"truncated shape of key {key!r} at byte {pos}")
    shape = dims.unpack_from(mv, pos)
    pos += dims.size
    dtype = _DTYPES[code]
    pad = -pos % dtype.itemsize
    if pos + pad > end or mv[pos : pos + pad] != _ZEROS[:pad]:
        raise CodecError(f"bad or truncated padding of key {key!r} at byte {pos}")
    pos += pad
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if nbytes > end - pos:
        raise CodecError(
            f"array of key {key!r} with shape {shape} and dtype {dtype} needs "
            f"{nbytes} bytes at byte {pos}, only {end - pos} remain"
        )
    if count == 0:
        if math.prod(d for d in shape if d) * dtype.itemsize > _MAX_NBYTES:
            raise CodecError(f"array of key {key!r} has impossible shape {shape} at byte {pos}")
        return np.zeros(shape, dtype), pos
    if code == _BOOL_CODE:
        _check_bools(mv, pos, nbytes, key)
    arr = np.frombuffer(mv, dtype, count, pos)
    if not arr.flags.aligned:
        arr = arr.copy()
    return (arr if ndim == 1 else arr.reshape(shape)), pos + nbytes


# One loop on purpose: it runs once per record, and a call per value would cost time there, so
# only arrays, bools, non-bytes buffers and the wording of errors are left to helpers.
def decode(data: bytes | memoryview) -> dict[str, Any]:
    """The record encoded in `data`; arrays are views into `data` (see the module docstring)."""
    mv = memoryview(data) if type(data) is bytes else _byte_view(data)
    end, pos = mv.nbytes, _HEADER.size
    if end < pos:
        raise CodecError(f"truncated header: {end} bytes, a record has at least {_HEADER.size}")
    magic, version, reserved, count = _HEADER.unpack_from(mv, 0)
    if (magic, version, reserved) != _EXPECTED_HEADER or count * _MIN_ENTRY > end - pos:
        raise _header_error(magic, version, reserved, count, end - pos)
    out: dict = {}
    for _ in range(count):
        if pos + _ENTRY.size > end:
            raise CodecError(f"truncated entry header at byte {pos}")
        klen, tag = _ENTRY.unpack_from(mv, pos)
        start = pos + _ENTRY.size
        pos = start + klen
        if pos > end:
            raise CodecError(f"key of {klen} bytes at byte {start} runs past the end ({end})")
        try:
            key = str(mv[start:pos], "utf-8")
        except UnicodeDecodeError:
            raise CodecError(f"key at byte {start} is not valid UTF-8") from None
        if key in out:
            raise CodecError(f"duplicate key {key!r} at byte {start}")
        if tag == _ARR:
            out[key], pos = _decode_array(mv, pos, key)
            continue
        size = 1 if tag == _BOOL else 8
        if tag > _ARR or pos + size > end:
            raise _value_error(tag, key, start, pos)
        if tag == _INT or tag == _FLOAT:
            out[key] = (_I64 if tag == _INT else _F64).unpack_from(mv, pos)[0]
        elif tag == _BOOL:
            out[key] = _decode_bool(mv, pos, key)
        else:  # bytes or str: a length, then the payload
            (length,) = _U64.unpack_from(mv, pos)
            if length > end - pos - size:
                raise _length_error(key, length, pos, end - pos - size)
            payload = mv[pos + size : pos + size + length]
            try:
                out[key] = bytes(payload) if tag == _BYTES else str(payload, "utf-8")
            except UnicodeDecodeError:
                raise CodecError(
                    f"str value of key {key!r} at byte {pos + size} is not valid UTF-8"
                ) from None
            pos += length
        pos += size
    if pos != end:
        raise CodecError(f"{end - pos} bytes of trailing garbage at byte {pos}")
    return out


decode.thread_safe = True  # type: ignore[attr-defined]  # no state: tpufeed.run.threaded


def _byte_view(data: Any) -> memoryview:
    """`data`, any contiguous buffer but `bytes`, as a flat memoryview of bytes."""
    try:
        mv = memoryview(data)
        if not mv.c_contiguous:
            raise TypeError("the buffer is not contiguous")
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
    except (TypeError, ValueError) as e:
        raise CodecError(f"cannot decode {type(data).__name__}: {e}") from None
    return mv


def _header_error(
    magic: bytes, version: int, reserved: bytes, count: int, remain: int
) -> CodecError:
    """What is wrong with a header: its magic, version, reserved bytes or entry count."""
    if magic != _MAGIC:
        return CodecError(
            f"bad magic {magic!r} at byte 0 (expected {_MAGIC!r}): not a tpufeed record"
        )
    if version != FORMAT_VERSION:
        return CodecError(
            f"unsupported codec format version {version} at byte 4; this tpufeed "
            f"reads version {FORMAT_VERSION}"
        )
    if reserved != b"\0\0\0":
        return CodecError(f"reserved header bytes 5..7 are {reserved!r}, expected zeros")
    return CodecError(f"header claims {count} entries but only {remain} bytes follow")


def _value_error(tag: int, key: str, key_at: int, pos: int) -> CodecError:
    """A value of an unknown type tag (its key at byte `key_at`), or one cut short at `pos`."""
    if tag > _ARR:
        return CodecError(f"unknown type tag {tag} of key {key!r} at byte {key_at - 1}")
    return CodecError(f"truncated value of key {key!r} at byte {pos}")


def _length_error(key: str, length: int, pos: int, remain: int) -> CodecError:
    """A bytes or str value whose length, at byte `pos`, claims more than `remain` bytes."""
    return CodecError(
        f"value of key {key!r} claims {length} bytes at byte {pos}, only {remain} remain"
    )


def _decode_bool(mv: memoryview, pos: int, key: str) -> bool:
    """The bool value of `key` at byte `pos`: one byte, 0 or 1."""
    flag = mv[pos]
    if flag > 1:
        raise CodecError(f"bool value {flag} of key {key!r} at byte {pos} is not 0 or 1")
    return flag == 1


# Of the dtypes the codec knows, only bool has byte patterns it cannot hold: numpy stores
# whatever byte it is given (2 prints as True, but `astype(np.uint8)` and JAX give 2 back).
# Every pattern of the others is a value: any bits are an integer, and any bits of a float or
# complex are a number, an infinity or a NaN (with its payload, quiet or signalling), all of
# which numpy holds and the encoder itself writes. So bool payloads alone are checked.
def _check_bools(mv: memoryview, pos: int, nbytes: int, key: str) -> None:
    """Raises naming the first byte of a bool array's payload that is not 0 or 1."""
    if nbytes <= _SMALL_BOOLS:  # a few hundred ns, where a numpy reduction costs microseconds
        bad = bool(mv[pos : pos + nbytes].tobytes().translate(None, b"\0\1"))
    else:
        bad = int(np.frombuffer(mv, np.uint8, nbytes, pos).max()) > 1
    if bad:
        payload = np.frombuffer(mv, np.uint8, nbytes, pos)
        at = int(np.flatnonzero(payload > 1)[0])
        raise CodecError(
            f"bool array of key {key!r} holds byte {payload[at]:#04x} at byte {pos + at} "
            f"(element {at}); a bool is 0 or 1: the record is corrupt or was not written by "
            "tpufeed.codec.encode"
        )
