"""WebDataset's `.cbor` fields, decoded to the values `cbor.loads` (WebDataset's decoder) gives,
within bounds and without the `cbor` package.

Integers, byte and text strings (definite or in chunks), arrays, maps, half, single and double
floats, true, false, null and undefined (None) are what `cbor.loads` makes of them; tags 2
and 3 are big integers, and any other tag a `CBORTag(tag, value)`, as the package's compiled
decoder (the one WebDataset calls) leaves a date or a regular expression too. Every declared
length is checked against the bytes left before anything is made (an array of n items needs
at least n bytes), nesting stops at `MAX_DEPTH`, and bad bytes raise `ValueError` (the caller
names the field and sample).

>>> decode(bytes.fromhex("a26161016162820203"))
{'a': 1, 'b': [2, 3]}
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

__all__ = ["MAX_DEPTH", "CBORTag", "decode"]

MAX_DEPTH = 100  # as the cbor package's own limit
_BREAK = 0xFF
_FLOATS = {0xFA: struct.Struct(">f"), 0xFB: struct.Struct(">d")}
_SIMPLE = {0xF4: False, 0xF5: True, 0xF6: None, 0xF7: None}


class CBORTag(NamedTuple):
    """A tagged value whose tag tpufeed does not interpret (the cbor package's `Tag`)."""

    tag: int
    value: Any


def decode(data: bytes) -> Any:
    """The value of one CBOR item that takes all of `data`."""
    reader = _Reader(data)
    value = reader.item(0)
    if reader.at != len(data):
        raise ValueError(f"{len(data) - reader.at:,} bytes follow the CBOR item")
    return value


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        if n > len(self.data) - self.at:
            raise ValueError(
                f"byte {self.at:,} declares {n:,} bytes where {len(self.data) - self.at:,} remain"
            )
        self.at += n
        return self.data[self.at - n : self.at]

    def head(self) -> tuple[int, int, int | None]:
        """(initial byte, major type, argument; None for an indefinite length)."""
        initial = self.take(1)[0]
        info = initial & 0x1F
        if info < 24:
            return initial, initial >> 5, info
        if info < 28:
            return initial, initial >> 5, int.from_bytes(self.take(1 << (info - 24)), "big")
        if info == 31:
            return initial, initial >> 5, None
        raise ValueError(f"byte {self.at - 1:,}: reserved additional information {info}")

    def count(self, n: int) -> int:
        """`n` items declared: each takes a byte at least, so no more than the bytes left."""
        if n > len(self.data) - self.at:
            raise ValueError(
                f"byte {self.at:,} declares {n:,} items where {len(self.data) - self.at:,} "
                "bytes remain"
            )
        return n

    def item(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise ValueError(f"items nested deeper than {MAX_DEPTH}")
        initial, major, arg = self.head()
        if major == 7:
            return self._simple(initial, arg)
        if major in (0, 1, 6) and arg is None:
            raise ValueError(f"byte {self.at - 1:,}: major type {major} has no indefinite length")
        if major == 0:
            return arg
        if major == 1:
            return -1 - arg  # type: ignore[operator]  # arg is an int: checked above
        if major in (2, 3):
            raw = self.take(arg) if arg is not None else self._chunks(major)
            return raw if major == 2 else raw.decode("utf-8")
        if major == 4:
            return self._array(arg, depth)
        if major == 5:
            return self._map(arg, depth)
        return _tagged(arg, self.item(depth + 1))  # type: ignore[arg-type]  # major 6: an int

    def _simple(self, initial: int, arg: int | None) -> Any:
        if initial == 0xF9:
            return _half(arg or 0)
        if initial in _FLOATS:
            size = _FLOATS[initial].size
            return _FLOATS[initial].unpack(arg.to_bytes(size, "big"))[0]  # type: ignore[union-attr]
        if initial in _SIMPLE:
            return _SIMPLE[initial]
        raise ValueError(f"byte {self.at - 1:,}: unknown simple value 0x{initial:02x}")

    def _chunks(self, major: int) -> bytes:
        pieces = []
        while self.data[self.at : self.at + 1] != bytes([_BREAK]):
            _, kind, arg = self.head()
            if kind != major or arg is None:
                raise ValueError(f"byte {self.at:,}: a chunk of another type in a string")
            pieces.append(self.take(arg))
        self.take(1)
        return b"".join(pieces)

    def _array(self, arg: int | None, depth: int) -> list[Any]:
        if arg is not None:
            return [self.item(depth + 1) for _ in range(self.count(arg))]
        out = []
        while not self._at_break():
            out.append(self.item(depth + 1))
        return out

    def _map(self, arg: int | None, depth: int) -> dict[Any, Any]:
        out = {}
        if arg is not None:
            for _ in range(self.count(2 * arg) // 2):
                key = self.item(depth + 1)
                out[key] = self.item(depth + 1)
            return out
        while not self._at_break():
            key = self.item(depth + 1)
            out[key] = self.item(depth + 1)
        return out

    def _at_break(self) -> bool:
        if self.at >= len(self.data):
            raise ValueError("an indefinite-length item is cut before its break")
        if self.data[self.at] == _BREAK:
            self.at += 1
            return True
        return False


def _half(bits: int) -> float:
    exponent, mantissa = (bits >> 10) & 0x1F, bits & 0x3FF
    if exponent == 0:
        value = mantissa * 2.0**-24
    elif exponent == 31:
        value = float("inf") if mantissa == 0 else float("nan")
    else:
        value = (mantissa + 1024.0) * 2.0 ** (exponent - 25)
    return -value if bits & 0x8000 else value


def _tagged(tag: int, value: Any) -> Any:
    if tag not in (2, 3):
        return CBORTag(tag, value)
    if not isinstance(value, bytes):
        raise ValueError(f"a big integer (tag {tag}) of {type(value).__name__}, not bytes")
    number = int.from_bytes(value, "big")
    return number if tag == 2 else -1 - number
