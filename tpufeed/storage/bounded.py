"""Parsing bytes from outside within bounds: the three rules every parser of tpufeed follows.

1. Every declared size is checked against the bytes that exist before anything is allocated
   for it (`declared`).
2. Decompression streams, with the declared output size as its bound (`decompressed`): a
   bomb never holds more than that size, plus one chunk, in memory.
3. Every step makes progress (`advancing`), or the parser stops.

Anything a parser raises on bad bytes (`MemoryError`, `OverflowError`, `RecursionError`,
`struct.error`, a bad value's `ValueError` or `TypeError`, ...) becomes, inside `parsing`, a
`CorruptDataError` naming the file, the byte offset or record, and the field.

>>> with parsing("x.tar", "the pax header", offset=1024):  # doctest: +SKIP
...     length = declared(int(text), remaining, "x.tar", "the pax record length", 1024)
"""

from __future__ import annotations

import bz2
import contextlib
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from tpufeed.errors import CorruptDataError, TpufeedError, missing_dependency

__all__ = [
    "COMPRESSIONS",
    "advancing",
    "declared",
    "decompressed",
    "malformed",
    "parsing",
]

# What bad bytes make parsers raise (a KeyboardInterrupt or a SystemExit is never one of them).
_PARSE_ERRORS: tuple[type[BaseException], ...] = (
    MemoryError,
    OverflowError,
    RecursionError,
    struct.error,
    ValueError,
    TypeError,
    IndexError,
    KeyError,
    EOFError,
    AttributeError,
    zlib.error,
)
COMPRESSIONS = ("zstd", "gz", "bz2")
_OUT_CHUNK = 1 << 20
_IN_CHUNK = 1 << 20


def malformed(
    path: str,
    what: str,
    cause: str,
    offset: int | None = None,
    record: int | None = None,
) -> CorruptDataError:
    """The error for bad bytes: the file, where (a byte offset or a record), the field, why."""
    where = f" at byte {offset:,}" if offset is not None else ""
    where += f" (record {record})" if record is not None else ""
    return CorruptDataError(f"{path}: {what}{where}: {cause}", path=path, record=record)


@contextlib.contextmanager
def parsing(
    path: str, what: str, offset: int | None = None, record: int | None = None
) -> Iterator[None]:
    """Turns what bad bytes make a parser raise into a `CorruptDataError` naming `path`,
    `what` is parsed (a field, a header), and the `offset` or `record`. tpufeed's own errors
    pass through unchanged."""
    try:
        yield
    except TpufeedError:
        raise
    except _PARSE_ERRORS as error:
        name = type(error).__name__
        name = f"{type(error).__module__}.{name}" if name == "error" else name  # zlib.error
        cause = f"{name}: {error}" if str(error) else name
        raise malformed(path, what, cause, offset, record) from None


def declared(size: int, available: int, path: str, what: str, offset: int | None = None) -> int:
    """`size`, a length the bytes declare, if `available` bytes can hold it; raises otherwise,
    before anything of that size is allocated."""
    if not isinstance(size, int) or size < 0:
        raise malformed(path, what, f"declares {size!r} bytes, not a size", offset)
    if size > available:
        raise malformed(
            path, what, f"declares {size:,} bytes where only {available:,} remain", offset
        )
    return size


def advancing(before: int, after: int, path: str, what: str) -> int:
    """`after`, a parser's new position, if it lies past `before`; a parser that would stand
    still or go back (and so loop forever) stops with an error instead."""
    if after <= before:
        raise malformed(
            path, what, f"leads from byte {before:,} back to byte {after:,}: it would loop", before
        )
    return after


def decompressed(
    algorithm: str, source: BinaryIO, declared_size: int, path: str, exact: bool = True
) -> Iterator[bytes]:
    """The output of the compressed stream `source` (`algorithm`: zstd, gz or bz2), in pieces
    of at most 1 MiB; raises as soon as it passes `declared_size`, or if it ends short of it
    (`exact=False`: a bound it may stay under, for a stream that declares no size of its own).
    Memory stays within one piece of input and one of output, whatever the stream says."""
    what = f"its {algorithm} stream"
    total = 0
    with parsing(path, what):
        for piece in _pieces(algorithm, source):
            total += len(piece)
            if total > declared_size:
                raise malformed(
                    path,
                    what,
                    f"decompresses to more than the {declared_size:,} bytes "
                    + ("declared" if exact else "a stream of its size can make"),
                )
            yield piece
    if exact and total != declared_size:
        raise malformed(
            path, what, f"decompresses to {total:,} bytes, not the {declared_size:,} declared"
        )


def _pieces(algorithm: str, source: BinaryIO) -> Iterator[bytes]:
    if algorithm == "zstd":
        return _zstd_pieces(source)
    if algorithm == "gz":
        return _members(source, lambda: _ZlibStream(zlib.decompressobj(wbits=31)))
    if algorithm == "bz2":
        return _members(source, lambda: _Bz2Stream(bz2.BZ2Decompressor()))
    raise ValueError(f"no decompressor for {algorithm!r} (known: {', '.join(COMPRESSIONS)})")


def _zstd_pieces(source: BinaryIO) -> Iterator[bytes]:
    try:
        import zstandard
    except ImportError:
        raise missing_dependency("zstandard", "mds") from None
    reader = zstandard.ZstdDecompressor().stream_reader(
        source, read_size=_IN_CHUNK, read_across_frames=True, closefd=False
    )
    try:
        while piece := reader.read(_OUT_CHUNK):
            yield piece
    except zstandard.ZstdError as error:
        raise ValueError(str(error)) from None


class _ZlibStream:
    """One gzip member: `feed` input, then `drain` output a bounded piece at a time."""

    def __init__(self, decompressor: Any):
        self.d, self.pending = decompressor, b""

    def feed(self, data: bytes) -> None:
        self.pending = data

    def drain(self) -> bytes:
        piece = self.d.decompress(self.pending, _OUT_CHUNK)
        self.pending = self.d.unconsumed_tail
        return piece

    def hungry(self, piece: bytes) -> bool:
        return not self.pending and len(piece) < _OUT_CHUNK

    @property
    def eof(self) -> bool:
        return bool(self.d.eof)

    @property
    def rest(self) -> bytes:
        return bytes(self.d.unused_data)


class _Bz2Stream(_ZlibStream):
    """One bzip2 stream (it keeps unused input itself)."""

    def drain(self) -> bytes:
        data, self.pending = self.pending, b""
        try:
            return bytes(self.d.decompress(data, _OUT_CHUNK))
        except OSError as error:  # bz2's word for bad bytes ("Invalid data stream")
            raise ValueError(str(error)) from None

    def hungry(self, piece: bytes) -> bool:
        return bool(self.d.needs_input)


def _members(source: BinaryIO, make: Callable[[], _ZlibStream]) -> Iterator[bytes]:
    """The output of every stream in `source` one after another (gzip members, bzip2 streams),
    in bounded pieces; a stream cut before its end marker is refused."""
    stream, started = make(), False
    while data := source.read(_IN_CHUNK):
        stream.feed(data)
        started, idle = True, 0
        while True:
            piece = stream.drain()
            if piece:
                yield piece
            idle = 0 if piece else idle + 1
            if idle > 2:  # neither output nor an end: a decompressor that stands still
                raise ValueError("the decompressor makes no progress")
            if stream.eof:
                rest = stream.rest
                stream, started = make(), bool(rest)
                stream.feed(rest)
                if rest:
                    continue
                break
            if stream.hungry(piece):
                break
    if started and not stream.eof:
        raise EOFError("the stream ends before its end marker (cut off)")
