"""`tf.train.Example` records without TensorFlow: a checked protobuf wire-format parser and writer.

`parse_example(data)` returns {name: value}: int64_list as an int64 array, float_list as a
float32 array, bytes_list as `bytes` when it holds one value (else a list of bytes). Packed
and unpacked encodings are both read; unknown fields are skipped; malformed input raises
ValueError saying what and where. Nothing is executed or unpickled.

>>> parse_example(encode_example({"label": 3, "image": b"\\x89PNG"}))["label"]
array([3])
>>> ds.map(ParseExample({"label": (), "image": ()}))  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ParseExample", "encode_example", "parse_example"]

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= end:
            raise ValueError(f"truncated varint at byte {pos}")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError(f"varint longer than 10 bytes at byte {pos}")


def _fields(buf: bytes, pos: int, end: int) -> Iterator[tuple[int, int, Any]]:
    """Yields (field number, wire type, value or (start, end) of a length-delimited field)."""
    while pos < end:
        tag, pos = _varint(buf, pos, end)
        number, wire = tag >> 3, tag & 7
        if wire == _VARINT:
            value, pos = _varint(buf, pos, end)
            yield number, wire, value
        elif wire == _LEN:
            length, pos = _varint(buf, pos, end)
            if length > end - pos:
                raise ValueError(
                    f"field {number} at byte {pos} claims {length} bytes, {end - pos} remain"
                )
            yield number, wire, (pos, pos + length)
            pos += length
        elif wire in (_FIXED32, _FIXED64):
            size = 4 if wire == _FIXED32 else 8
            if pos + size > end:
                raise ValueError(f"truncated fixed-size field {number} at byte {pos}")
            yield number, wire, (pos, pos + size)
            pos += size
        else:
            raise ValueError(f"unsupported wire type {wire} of field {number} at byte {pos}")


def _packed_varints(buf: bytes, start: int, end: int) -> np.ndarray:
    """Decodes packed varints with numpy: each byte contributes (b & 0x7f) << 7k."""
    raw = np.frombuffer(buf, np.uint8, end - start, start)
    if raw.size == 0:
        return np.zeros(0, np.int64)
    last = raw < 0x80
    if not last[-1]:
        raise ValueError(f"truncated packed varint ending at byte {end}")
    if last.all():
        return raw.astype(np.int64)
    ends = np.flatnonzero(last)
    starts = np.concatenate([[0], ends[:-1] + 1])
    if (ends - starts).max() >= 10:
        raise ValueError(f"varint longer than 10 bytes in the packed field at byte {start}")
    which = np.repeat(np.arange(ends.size), ends - starts + 1)
    shift = (np.arange(raw.size) - starts[which]).astype(np.uint64) * np.uint64(7)
    parts = (raw & 0x7F).astype(np.uint64) << shift
    return np.add.reduceat(parts, starts).view(np.int64)


def _feature(buf: bytes, start: int, end: int) -> Any:
    value: Any = np.zeros(0, np.float32)  # a Feature with no list set parses as empty
    for number, _, (s, e) in ((n, w, v) for n, w, v in _fields(buf, start, end) if w == _LEN):
        if number == 1:  # BytesList
            value = [bytes(buf[a:b]) for n, w, (a, b) in _len_fields(buf, s, e) if n == 1]
            value = value[0] if len(value) == 1 else value
        elif number == 2:  # FloatList
            parts = []
            for n, w, v in _fields(buf, s, e):
                if n == 1 and w == _LEN:
                    if (v[1] - v[0]) % 4:
                        raise ValueError(f"packed float list of {v[1] - v[0]} bytes at byte {v[0]}")
                    parts.append(np.frombuffer(buf, "<f4", (v[1] - v[0]) // 4, v[0]))
                elif n == 1 and w == _FIXED32:
                    parts.append(np.frombuffer(buf, "<f4", 1, v[0]))
            value = np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)
        elif number == 3:  # Int64List
            parts = []
            for n, w, v in _fields(buf, s, e):
                if n == 1 and w == _LEN:
                    parts.append(_packed_varints(buf, *v))
                elif n == 1 and w == _VARINT:
                    parts.append(np.array([v], np.uint64).view(np.int64))
            value = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
    return value


def _len_fields(buf: bytes, start: int, end: int) -> Iterator[tuple[int, int, tuple[int, int]]]:
    for number, wire, value in _fields(buf, start, end):
        if wire == _LEN:
            yield number, wire, value
        elif number == 1:
            raise ValueError(f"field 1 at byte {start} has wire type {wire}, expected bytes")


def parse_example(data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """The features of a serialized `tf.train.Example`, by name (see the module docstring)."""
    buf = bytes(data)
    out: dict[str, Any] = {}
    for number, _, (s, e) in _len_fields(buf, 0, len(buf)):
        if number != 1:
            continue
        for n, _, (es, ee) in _len_fields(buf, s, e):
            if n != 1:
                continue
            name, value = None, np.zeros(0, np.float32)
            for fn, _, (a, b) in _len_fields(buf, es, ee):
                if fn == 1:
                    try:
                        name = buf[a:b].decode("utf-8")
                    except UnicodeDecodeError:
                        raise ValueError(f"feature name at byte {a} is not UTF-8") from None
                elif fn == 2:
                    value = _feature(buf, a, b)
            if name is None:
                raise ValueError(f"a feature map entry at byte {es} has no name")
            out[name] = value
    return out


def _key(number: int, wire: int) -> bytes:
    return _encode_varint((number << 3) | wire)


def _encode_varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    return _key(number, _LEN) + _encode_varint(len(payload)) + payload


def _feature_bytes(name: str, value: Any) -> bytes:
    if isinstance(value, (bytes, str)):
        value = [value]
    if (
        isinstance(value, (list, tuple))
        and value
        and all(isinstance(v, (bytes, str)) for v in value)
    ):
        items = b"".join(_len_field(1, v.encode() if isinstance(v, str) else v) for v in value)
        return _len_field(1, items)
    arr = np.asarray(value)
    if arr.dtype.kind in "biu":
        payload = b"".join(_encode_varint(int(v)) for v in arr.reshape(-1).tolist())
        return _len_field(3, _len_field(1, payload) if payload else b"")
    if arr.dtype.kind == "f":
        payload = arr.reshape(-1).astype("<f4").tobytes()
        return _len_field(2, _len_field(1, payload) if payload else b"")
    raise ValueError(
        f"feature {name!r}: cannot store {type(value).__name__} of dtype "
        f"{arr.dtype} in a tf.train.Example (ints, floats, bytes or str)"
    )


def encode_example(features: Mapping[str, Any]) -> bytes:
    """A serialized `tf.train.Example` of `features`, keys sorted so equal dicts give equal bytes.

    ints and bools -> int64_list, floats -> float_list (float32), bytes / str and lists of
    them -> bytes_list; arrays are flattened.
    """
    entries = b"".join(
        _len_field(1, _len_field(1, name.encode()) + _len_field(2, _feature_bytes(name, value)))
        for name, value in sorted(features.items())
    )
    return _len_field(1, entries)


@dataclass(frozen=True)
class ParseExample:
    """A map: serialized `tf.train.Example` (or `element[key]`) -> dict of its features.

    `features` maps names to keep to a shape: `()` unwraps one value (a scalar array, or
    bytes), a tuple reshapes (-1 allowed), None keeps the flat list; None keeps every feature.
    """

    features: Mapping[str, tuple[int, ...] | None] | None = None
    key: str | None = None

    def __call__(self, element: Any) -> dict[str, Any]:
        data = element[self.key] if self.key is not None else element
        parsed = parse_example(data)
        if self.features is None:
            return parsed
        out = {}
        for name, shape in self.features.items():
            if name not in parsed:
                raise KeyError(
                    f"feature {name!r} is missing from the tf.train.Example "
                    f"(it has {sorted(parsed)})"
                )
            value = parsed[name]
            if shape is not None:
                value = _reshape(name, value, tuple(shape))
            out[name] = value
        return out


def _reshape(name: str, value: Any, shape: tuple[int, ...]) -> Any:
    if isinstance(value, bytes) or (isinstance(value, list) and shape != ()):
        if shape == () or (isinstance(value, list) and shape in ((len(value),), (-1,))):
            return value
        raise ValueError(f"feature {name!r}: a bytes feature cannot take shape {shape}")
    if isinstance(value, list):
        raise ValueError(f"feature {name!r} has {len(value)} values, shape () needs one")
    try:
        return value.reshape(shape)
    except ValueError:
        raise ValueError(
            f"feature {name!r} has {value.size} values, which do not fit shape {shape}"
        ) from None
