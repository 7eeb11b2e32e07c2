"""Round trips, zero-copy views, and hostile input for `tpufeed.codec`."""

from __future__ import annotations

import struct
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tpufeed.codec as codec
from tpufeed.codec import FORMAT_VERSION, decode, encode
from tpufeed.errors import CodecError

DTYPES = [
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
]
SHAPES = [(), (0,), (3,), (2, 0, 4), (2, 3, 4)]


def assert_same(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for key, x in a.items():
        y = b[key]
        if isinstance(x, (np.ndarray, np.generic)):
            x = np.asarray(x)
            assert isinstance(y, np.ndarray)
            assert y.shape == x.shape and y.dtype == x.dtype.newbyteorder("<"), key
            assert x.tobytes() == np.ascontiguousarray(y).astype(x.dtype).tobytes(), key
        else:
            assert type(y) is type(x), key
            assert y == x or (x != x and y != y), key


def test_all_sorted():
    assert codec.__all__ == sorted(codec.__all__)
    assert FORMAT_VERSION == 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_array_round_trip(dtype, shape):
    arr = (np.arange(int(np.prod(shape))) % 7 - 2).astype(dtype).reshape(shape)
    assert_same({"a": arr}, decode(encode({"a": arr})))


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_scalar_decodes_as_0d(dtype):
    scalar = np.dtype(dtype).type(1)
    out = decode(encode({"s": scalar}))["s"]
    assert isinstance(out, np.ndarray) and out.shape == () and out.dtype == np.dtype(dtype)
    assert out == scalar


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a[:, ::2, 1:],
        lambda a: np.asfortranarray(a),
        lambda a: a.transpose(2, 0, 1),
        lambda a: a.astype(a.dtype.newbyteorder(">")),
        lambda a: a.astype(a.dtype.newbyteorder(">"))[::-1],
    ],
    ids=["strided", "fortran", "transposed", "big-endian", "big-endian-reversed"],
)
@pytest.mark.parametrize("dtype", ["int16", "float64", "complex64", "uint32"])
def test_layouts_round_trip(make, dtype):
    arr = make(np.arange(24).astype(dtype).reshape(2, 3, 4))
    out = decode(encode({"a": arr}))["a"]
    assert out.dtype == np.dtype(dtype).newbyteorder("<")
    np.testing.assert_array_equal(out, arr)


def test_python_values_round_trip():
    record = {
        "b": b"\x00\xffraw",
        "empty": b"",
        "s": "héllo, 世界 🚀",
        "e": "",
        "i": -(2**63),
        "j": 2**63 - 1,
        "f": 0.1,
        "nan": float("nan"),
        "inf": -float("inf"),
        "t": True,
        "n": False,
        "": 0,
        "ключ": 1,
    }
    assert_same(record, decode(encode(record)))


def test_empty_dict():
    assert decode(encode({})) == {}
    assert len(encode({})) == 12


def test_decoded_arrays_are_views():
    record = {
        "k": 1,
        "a": np.arange(5, dtype=np.int8),
        "b": np.arange(6.0).reshape(2, 3),
        "c": np.ones(3, np.complex128),
        "d": np.float32(2.0),
    }
    data = encode(record)
    whole = np.frombuffer(data, np.uint8)
    out = decode(data)
    for key in "abcd":
        assert np.shares_memory(out[key], whole), key
        assert not out[key].flags.writeable and out[key].flags.aligned
    # A writable buffer yields writable views into it.
    buf = bytearray(data)
    np.testing.assert_array_equal(decode(buf)["b"], record["b"])
    assert decode(memoryview(buf))["b"].flags.writeable


def test_unaligned_buffer_gives_aligned_copies():
    record = {"a": np.arange(4, dtype=np.float64)}
    shifted = memoryview(b"\0" + encode(record))[1:]
    out = decode(shifted)["a"]
    assert out.flags.aligned
    np.testing.assert_array_equal(out, record["a"])


def test_any_contiguous_buffer_is_read_as_bytes():
    record = {"a": np.arange(3, dtype=np.int32)}
    data = encode(record)
    assert len(data) % 4 == 0
    assert_same(record, decode(np.frombuffer(data, np.uint32)))
    with pytest.raises(CodecError, match="trailing"):
        decode(np.frombuffer(data + bytes(4), np.uint32))


arrays = hnp.arrays(
    dtype=st.sampled_from(DTYPES).map(np.dtype)
    | st.sampled_from(DTYPES).map(lambda d: np.dtype(d).newbyteorder(">")),
    shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5),
)
values = (
    arrays
    | st.binary(max_size=20)
    | st.text(max_size=10)
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
)
records = st.dictionaries(st.text(max_size=8), values, max_size=6)


@settings(max_examples=300, deadline=None)
@given(records)
def test_property_round_trip(record):
    assert_same(record, decode(encode(record)))


def decodes_or_codec_error(data: bytes) -> None:
    try:
        out = decode(data)
    except CodecError:
        return
    assert isinstance(out, dict)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_arbitrary_bytes(data):
    decodes_or_codec_error(data)
    decodes_or_codec_error(encode({})[:8] + data)


@settings(max_examples=500, deadline=None)
@given(records, st.data())
def test_fuzz_mutated_encodings(record, data):
    blob = bytearray(encode(record))
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        at = data.draw(st.integers(0, len(blob)))
        if op == "flip" and at < len(blob):
            blob[at] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "truncate":
            del blob[at:]
        elif op == "insert":
            blob[at:at] = data.draw(st.binary(min_size=1, max_size=9))
        elif op == "delete":
            del blob[at : at + data.draw(st.integers(1, 9))]
    decodes_or_codec_error(bytes(blob))


def array_record(code: int, shape: tuple[int, ...], payload: bytes = b"") -> bytes:
    """A hand-built record with one array entry under key "x"."""
    entry = (
        struct.pack("<HB", 1, 5) + b"x" + struct.pack(f"<BB{len(shape)}Q", code, len(shape), *shape)
    )
    header = b"TPFD" + bytes([FORMAT_VERSION]) + bytes(3) + struct.pack("<I", 1)
    head = header + entry
    itemsize = np.dtype(DTYPES[code]).itemsize if code < len(DTYPES) else 1
    return head + bytes(-len(head) % itemsize) + payload


def test_gigantic_shape_rejected_without_allocating():
    tracemalloc.start()
    try:
        for shape in [(2**40,), (2**32, 2**32, 2**32), (2**64 - 1, 2**64 - 1), (2**62, 0, 2**62)]:
            with pytest.raises(CodecError, match="'x'"):
                decode(array_record(4, shape, bytes(10)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_zero_size_with_huge_dim_is_fine():
    out = decode(array_record(4, (2**40, 0)))["x"]
    assert out.shape == (2**40, 0) and out.dtype == np.int64


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "truncated header"),
        (b"NOPE" + bytes(8), "bad magic"),
        (b"TPFD\x07" + bytes(7), "version 7"),
        (b"TPFD\x01\x00\x01\x00" + bytes(4), "reserved"),
        (b"TPFD\x01\x00\x00\x00\xff\xff\xff\xff", "claims 4294967295 entries"),
        (encode({"a": 1}) + b"\0", "trailing"),
        (encode({"a": 1})[:-1], "truncated value of key 'a'"),
        (encode({"ab": 1})[:16], "runs past the end"),
        (encode({"a": b"xy"}).replace(b"xy", b"x"), "claims 2 bytes"),
        (encode({"a": "xy"}).replace(b"xy", b"\xff\xfe"), "not valid UTF-8"),
        (encode({"\xe9": 1}).replace("\xe9".encode(), b"\xc3\x28"), "key at byte 15"),
        (encode({"a": 1, "b": 2}).replace(b"b", b"a"), "duplicate key 'a'"),
        (encode({"a": 1}).replace(b"\x01\x00\x01a", b"\x01\x00\x09a"), "unknown type tag 9"),
        (encode({"a": True}).replace(b"a\x01", b"a\x02"), "bool value 2"),
        (array_record(99, (1,), bytes(8)), "unknown dtype code 99"),
        (array_record(4, (1,) * 33), "33 dimensions"),
        (array_record(4, (2,), bytes(8)), "needs 16 bytes"),
        (array_record(4, (1,), bytes(8))[:-9] + b"\x01" + bytes(8), "padding"),
    ],
)
def test_malformed_input_messages(data, message):
    with pytest.raises(CodecError, match=message):
        decode(data)


def test_not_a_buffer():
    with pytest.raises(CodecError, match="int"):
        decode(12)
    with pytest.raises(CodecError, match="not contiguous|contiguous"):
        decode(memoryview(bytes(24))[::2])


# numpy 2 makes arrays of up to 64 dimensions, past the codec's 32; numpy 1 (1.26, the floor)
# stops at 32 itself.
TOO_MANY_DIMENSIONS = (
    [({"k": np.zeros((1,) * 33)}, "record key 'k': array has 33 dimensions")]
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0"
    else []
)


@pytest.mark.parametrize(
    "record, message",
    [
        ({1: 2}, "record key 1 is a int"),
        ({"k": [1, 2]}, "record key 'k': values of type list"),
        ({"k": None}, "record key 'k': values of type NoneType"),
        ({"k": np.array([object()])}, "record key 'k': arrays of dtype object"),
        ({"k": np.array(["a"])}, "record key 'k': arrays of dtype <U1"),
        ({"k": np.zeros(2, [("a", "i4")])}, "record key 'k': arrays of dtype"),
        ({"k": np.zeros(2, np.longdouble)}, "record key 'k': arrays of dtype"),
        ({"k": np.zeros(2, "datetime64[s]")}, "record key 'k': arrays of dtype"),
        ({"k": 2**63}, "record key 'k': int 9223372036854775808 is outside"),
        ({"k": -(2**63) - 1}, "record key 'k': int .* outside"),
        ({"k": "\ud800"}, "record key 'k': str value"),
        ({"\ud800": 1}, "record key '\\\\ud800'"),
        *TOO_MANY_DIMENSIONS,
    ],
)
def test_encode_errors_name_the_key(record, message):
    with pytest.raises(CodecError, match=message):
        encode(record)


def test_encode_rejects_non_dict():
    with pytest.raises(CodecError, match="list"):
        encode([("a", 1)])


def bool_record(payload: bytes, shape: tuple[int, ...] | None = None) -> bytes:
    """A record with one bool array under key "x", its payload as given (0 and 1 or not)."""
    return array_record(0, (len(payload),) if shape is None else shape, payload)


@pytest.mark.parametrize("bad", [0x02, 0x80, 0xFF])
@pytest.mark.parametrize("size, at", [(1, 0), (7, 5), (5000, 4321)], ids=["one", "small", "big"])
def test_bool_array_bytes_other_than_0_and_1_are_refused(bad, size, at):
    """Numpy would hold the byte: True when printed, `bad` again through astype or JAX."""
    payload = bytearray(np.arange(size) % 2 == 1)
    payload[at] = bad
    data = bool_record(bytes(payload))
    start = len(data) - size
    with pytest.raises(CodecError, match=f"key 'x' holds byte {bad:#04x} at byte {start + at} "):
        decode(data)
    with pytest.raises(CodecError, match=f"element {at}\\)"):
        decode(bytearray(data))  # a writable buffer too


def test_bool_arrays_of_every_shape_are_checked_and_0_1_still_decode():
    matrix = np.array([[True, False, True], [False, False, True]])
    assert_same({"x": matrix}, decode(encode({"x": matrix})))
    assert_same({"x": np.bool_(True)}, decode(encode({"x": np.bool_(True)})))
    for shape, payload in [((2, 3), b"\0\1\0\1\0\3"), ((), b"\x07")]:
        with pytest.raises(CodecError, match="bool array of key 'x'"):
            decode(bool_record(payload, shape))


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != "bool"])
def test_every_byte_pattern_of_the_other_dtypes_is_a_value(dtype):
    """Decided, not missed: integers take any bits, and any float or complex bits are a number,
    an infinity or a NaN (quiet or signalling, with its payload), which decode keeps bit for
    bit. Only bool has patterns it cannot hold."""
    itemsize = np.dtype(dtype).itemsize
    patterns = [bytes([b]) * itemsize for b in (0x00, 0x01, 0x7F, 0x80, 0xFF)]
    patterns.append(np.random.default_rng(0).bytes(itemsize * 512))  # random bits of any kind
    if dtype.startswith(("float", "complex")):  # signalling NaN, negative NaN with a payload
        half = itemsize // (2 if dtype.startswith("complex") else 1)
        top = {2: 0x7D, 4: 0x7FA00001, 8: 0x7FF4000000000001}[half]
        patterns.append(top.to_bytes(half, "little") * (itemsize // half))
        patterns.append((top | 1 << (8 * half - 1)).to_bytes(half, "little") * (itemsize // half))
    code = DTYPES.index(dtype)
    for payload in patterns:
        out = decode(array_record(code, (len(payload) // itemsize,), payload))["x"]
        assert out.dtype == np.dtype(dtype) and out.tobytes() == payload


def test_a_bool_array_holding_other_bytes_is_not_encoded():
    """What decode refuses is not written either: a view of other bytes as bool."""
    mask = np.frombuffer(b"\x01\x00\x02\x01", np.bool_).reshape(2, 2)
    with pytest.raises(CodecError, match="record key 'm': bool array holds byte 0x02 at element 2"):
        encode({"m": mask})
    assert decode(encode({"m": mask != 0}))["m"].tolist() == [[True, False], [True, True]]
