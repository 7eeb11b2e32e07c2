"""`codec.decode` on random and damaged bytes: each call ends in the right answer or
`CodecError`, never another exception and never a hang (pytest-timeout bounds each test).

"The right answer" for bytes that do decode: the record those bytes spell, exactly. Encoding
it again gives back the same bytes (the layout has one spelling per record: zero padding,
bools 0 or 1, little-endian), every bool array holds only 0 and 1, and `bytes`, `bytearray`
and an unaligned view of the same bytes decode alike.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tests.faults.budget import TIMEOUT_S, examples
from tpufeed.codec import decode, encode
from tpufeed.errors import CodecError

pytestmark = pytest.mark.timeout(TIMEOUT_S)  # a hang fails the test

DTYPES = [
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
]  # fmt: skip
HEADER = b"TPFD\x01\x00\x00\x00"

arrays = hnp.arrays(
    dtype=st.sampled_from(DTYPES).map(np.dtype),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
)
values = (
    arrays
    | st.binary(max_size=16)
    | st.text(max_size=8)
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats()
)
records = st.dictionaries(st.text(max_size=6), values, max_size=5)

# What damage looks like: bits flipped, bytes set to values with a meaning somewhere (0, 1 and
# 2 for a bool, a dtype code, an ndim), 8-byte words set to lengths and dims that overflow,
# cuts, insertions, and a stretch copied from elsewhere in the record.
special_bytes = st.sampled_from([0, 1, 2, 5, 13, 14, 32, 33, 0x7F, 0x80, 0xFE, 0xFF])
special_words = st.sampled_from(
    [0, 1, 3, 2**31, 2**32 - 1, 2**32, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1]
)


def check(data: bytes) -> None:
    """Decodes `data`, which must give the right answer or CodecError (see the docstring)."""
    try:
        record = decode(data)
    except CodecError:
        for other in (bytearray(data), memoryview(b"\0" + data)[1:]):
            with pytest.raises(CodecError):
                decode(other)
        return
    assert isinstance(record, dict)
    assert encode(record) == data
    for key, value in record.items():
        if isinstance(value, np.ndarray) and value.dtype == np.bool_:
            assert value.view(np.uint8).max(initial=0) <= 1, key
    for other in (bytearray(data), memoryview(b"\0" + data)[1:]):
        assert encode(decode(other)) == data


def damage(blob: bytearray, data: st.DataObject) -> None:
    """One random change to `blob`, in place."""
    op = data.draw(st.sampled_from(["flip", "byte", "word", "cut", "insert", "delete", "copy"]))
    at = data.draw(st.integers(0, len(blob)))
    if op == "flip" and at < len(blob):
        blob[at] ^= 1 << data.draw(st.integers(0, 7))
    elif op == "byte" and at < len(blob):
        blob[at] = data.draw(special_bytes)
    elif op == "word" and at + 8 <= len(blob):
        blob[at : at + 8] = struct.pack("<Q", data.draw(special_words))
    elif op == "cut":
        del blob[at:]
    elif op == "insert":
        blob[at:at] = data.draw(st.binary(min_size=1, max_size=9))
    elif op == "delete":
        del blob[at : at + data.draw(st.integers(1, 9))]
    elif op == "copy" and blob:
        start = data.draw(st.integers(0, len(blob) - 1))
        blob[at:at] = blob[start : start + data.draw(st.integers(1, 16))]


def check_damaged(record: dict, data: st.DataObject) -> None:
    blob = bytearray(encode(record))
    for _ in range(data.draw(st.integers(1, 4))):
        damage(blob, data)
    check(bytes(blob))


def check_random(data: bytes, after_header: bool) -> None:
    check(HEADER + data if after_header else data)


@examples(40)
@given(records)
def test_any_record_decodes_to_itself(record):
    check(encode(record))


@examples(60)
@given(records, st.data())
def test_damaged_records_decode_right_or_raise_codec_error(record, data):
    check_damaged(record, data)


@examples(60)
@given(st.binary(max_size=160), st.booleans())
def test_random_bytes_decode_right_or_raise_codec_error(data, after_header):
    check_random(data, after_header)


@examples(40)
@given(st.sampled_from(range(len(DTYPES))), st.binary(min_size=1, max_size=64), st.data())
def test_any_payload_under_any_dtype_decodes_right_or_raises(code, payload, data):
    """A hand-built array entry: bool payloads must hold 0 and 1; other dtypes take any bits."""
    itemsize = np.dtype(DTYPES[code]).itemsize
    payload = payload[: len(payload) // itemsize * itemsize] or bytes(itemsize)
    head = HEADER + struct.pack("<I", 1) + struct.pack("<HB", 1, 5) + b"x"
    head += struct.pack("<BBQ", code, 1, len(payload) // itemsize)
    blob = head + bytes(-len(head) % itemsize) + payload
    damaged = data.draw(st.booleans())
    if damaged:
        changed = bytearray(blob)
        damage(changed, data)
        blob = bytes(changed)
    check(blob)
    if DTYPES[code] == "bool" and not damaged and max(payload) > 1:
        with pytest.raises(CodecError, match="bool array of key 'x'"):
            decode(blob)


@pytest.mark.slow
@examples(2000)
@given(records, st.data())
def test_many_damaged_records(record, data):
    check_damaged(record, data)


@pytest.mark.slow
@examples(2000)
@given(st.binary(max_size=400), st.booleans())
def test_many_random_byte_strings(data, after_header):
    check_random(data, after_header)
