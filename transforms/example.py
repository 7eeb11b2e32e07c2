"""`tf.train.Example` records without TensorFlow: parsed by protobuf, written and checked here.

`parse_example(data)` returns {name: value}, in name order: int64_list as an int64 array,
float_list as a float32 array, bytes_list as `bytes` when it holds one value (else a list of
bytes). protobuf's own parser (upb) reads the bytes, with the message classes made from
TensorFlow's `example.proto` (Apache-2.0) in a descriptor pool of their own: no TensorFlow,
and no clash with TensorFlow's classes where it is imported too. Malformed input raises
ValueError saying what and where (`_check` walks the bytes for that). Nothing is executed or
unpickled.

>>> parse_example(encode_example({"label": 3, "image": b"\\x89PNG"}))["label"]
array([3])
>>> ds.map(ParseExample({"label": (), "image": ()}))  # doctest: +SKIP
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ParseExample", "encode_example", "parse_example"]

_VARINT, _FIXED64, _LEN, _FIXED32 = 0, 1, 2, 5
_FEW = 64  # int64 values read from the message one by one; more are read serialized


def parse_example(data: bytes | bytearray | memoryview) -> dict[str, Any]:
    """The features of a serialized `tf.train.Example`, by name (see the module docstring)."""
    from google.protobuf.message import DecodeError

    buf = bytes(data)
    try:
        features = _example_class().FromString(buf).features.feature
    except DecodeError:
        _check(buf)  # raises, saying what and where
        raise ValueError(f"protobuf cannot parse these {len(buf)} bytes") from None
    if "" in features:  # a name given as "", or none at all: only the bytes tell which
        _check(buf)
    return {name: _values(features[name]) for name in sorted(features)}


def _values(feature: Any) -> Any:
    kind = feature.WhichOneof("kind")
    if kind == "bytes_list":
        values = feature.bytes_list.value
        return values[0] if len(values) == 1 else list(values)
    # numpy reads a repeated field one Python number at a time; its serialized form (a packed
    # field: tag, length, then the values) is read at once: 20x quicker for 1,024 floats, 2x
    # for 3,072 ints (whose varints numpy decodes), where there are more than a few.
    if kind == "int64_list":
        values = feature.int64_list.value
        if len(values) <= _FEW:
            return np.fromiter(values, np.int64, len(values))
        packed = feature.int64_list.SerializeToString()
        size, start = _varint(packed, 1, len(packed))
        return _packed_varints(packed, start, start + size)
    if kind == "float_list":
        packed = feature.float_list.SerializeToString()
        if not packed:
            return np.zeros(0, np.float32)
        size, start = _varint(packed, 1, len(packed))
        return np.frombuffer(packed, "<f4", size // 4, start).astype(np.float32)
    return np.zeros(0, np.float32)  # a Feature with no list set parses as empty


def _packed_varints(buf: bytes, start: int, end: int) -> np.ndarray:
    """Decodes packed varints (as protobuf writes them: whole) with numpy: the k-th byte of a
    varint adds its low 7 bits << 7k, one pass per byte of the longest."""
    raw = np.frombuffer(buf, np.uint8, end - start, start)
    last = raw < 0x80
    if last.all():
        return raw.astype(np.int64)
    ends = np.flatnonzero(last)
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 0, ends[:-1] + 1
    lengths = ends - starts + 1
    low = (raw & 0x7F).astype(np.uint64)
    out = low[starts]
    for k in range(1, int(lengths.max())):
        longer = lengths > k
        out[longer] |= low[starts[longer] + k] << np.uint64(7 * k)
    return out.view(np.int64)


@functools.cache
def _example_class() -> Any:
    """`tensorflow.Example`, made from its descriptor (TensorFlow's feature.proto and
    example.proto, the messages an Example holds) in a pool of its own."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="tpufeed/example.proto", package="tensorflow", syntax="proto3"
    )
    for name, kind in (("Bytes", field.TYPE_BYTES), ("Float", field.TYPE_FLOAT)):
        file.message_type.add(name=f"{name}List").field.add(
            name="value", number=1, type=kind, label=field.LABEL_REPEATED
        )
    file.message_type.add(name="Int64List").field.add(
        name="value", number=1, type=field.TYPE_INT64, label=field.LABEL_REPEATED
    )
    feature = file.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, name in enumerate(("bytes_list", "float_list", "int64_list"), 1):
        type_name = f".tensorflow.{name.split('_')[0].capitalize()}List"
        feature.field.add(
            name=name, number=number, type=field.TYPE_MESSAGE, type_name=type_name, oneof_index=0
        )
    features = file.message_type.add(name="Features")
    features.field.add(
        name="feature",
        number=1,
        type=field.TYPE_MESSAGE,
        label=field.LABEL_REPEATED,
        type_name=".tensorflow.Features.FeatureEntry",
    )
    entry = features.nested_type.add(name="FeatureEntry", options={"map_entry": True})
    entry.field.add(name="key", number=1, type=field.TYPE_STRING)
    entry.field.add(
        name="value", number=2, type=field.TYPE_MESSAGE, type_name=".tensorflow.Feature"
    )
    file.message_type.add(name="Example").field.add(
        name="features", number=1, type=field.TYPE_MESSAGE, type_name=".tensorflow.Features"
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.Example"))


# -- the wire format, walked by hand to say what is wrong with bytes protobuf refused ---------


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


def _len_fields(buf: bytes, start: int, end: int) -> Iterator[tuple[int, int, tuple[int, int]]]:
    for number, wire, value in _fields(buf, start, end):
        if wire == _LEN:
            yield number, wire, value
        elif number == 1:
            raise ValueError(f"field 1 at byte {start} has wire type {wire}, expected bytes")


def _check(buf: bytes) -> None:
    """Walks a serialized Example down to its values, raising ValueError at the first thing
    that is not one: a length past the end, a truncated varint, a wire type no Example field
    has, a feature without a name or with one that is not UTF-8, a float list cut mid-value."""
    for number, _, (s, e) in _len_fields(buf, 0, len(buf)):
        for n, _, (es, ee) in _len_fields(buf, s, e) if number == 1 else ():
            named = False
            for fn, _, (a, b) in _len_fields(buf, es, ee) if n == 1 else ():
                if fn == 1:
                    named = True
                    try:
                        buf[a:b].decode("utf-8")
                    except UnicodeDecodeError:
                        raise ValueError(f"feature name at byte {a} is not UTF-8") from None
                elif fn == 2:
                    _check_feature(buf, a, b)
            if n == 1 and not named:
                raise ValueError(f"a feature map entry at byte {es} has no name")


def _check_feature(buf: bytes, start: int, end: int) -> None:
    for kind, _, (s, e) in _len_fields(buf, start, end):
        for n, wire, value in _fields(buf, s, e):
            if kind == 2 and n == 1 and wire == _LEN and (value[1] - value[0]) % 4:
                raise ValueError(
                    f"packed float list of {value[1] - value[0]} bytes at byte {value[0]}"
                )
            if kind == 3 and n == 1 and wire == _LEN:
                pos = value[0]
                while pos < value[1]:
                    _, pos = _varint(buf, pos, value[1])


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
