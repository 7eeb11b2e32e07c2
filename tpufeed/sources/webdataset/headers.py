"""A tar archive's members, read header by header within bounds: the walker under the sample
index of a WebDataset shard.

It reads what Python's `tarfile` (WebDataset's own reader) reads, and gives each member the
name, type, data offset and size `tarfile` gives it: POSIX ustar names with their prefix, GNU
long names and long links (`L`, `K`), pax extended headers (`x`, and Solaris' `X`) with their
`path` and `size`, and pax global headers (`g`). Where headers are chained before a member,
the first one to set a name or a size wins, as in `tarfile`. Unlike `tarfile` it trusts no
number in the file:

- every header's checksum is verified, and numbers (octal, base-256, pax decimal) are parsed
  strictly: a sign, a stray character or a negative size is an error, never a step backwards;
- every declared size (a member's data, a long name, a pax header) is checked against the
  bytes left in the file before anything is read for it (`bounded.declared`), and extended
  headers are read only up to 1 MiB;
- every step moves forward (`bounded.advancing`): a chain of extended headers is a loop, not
  recursion, and ends with the file;
- the archive must end with its end-of-archive block, so a tar cut between two members is an
  error, not a shorter shard.

Any fault raises `CorruptDataError` naming the tar, the byte offset, the header field and the
member before it (`bounded.malformed`, `bounded.parsing`). GNU sparse members are refused: a
WebDataset shard holds none.

>>> [m.name for m in walk_tar(lambda at, n: os.pread(fd, n, at), "x.tar", size)]  # doctest: +SKIP
['a/000.jpg', 'a/000.cls', ...]
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from tpufeed.errors import CorruptDataError
from tpufeed.storage.bounded import advancing, declared, malformed, parsing

__all__ = ["BLOCK", "MAX_EXTENDED", "REGULAR", "Member", "walk_tar"]

BLOCK = 512
MAX_EXTENDED = 1 << 20  # the most bytes one GNU long name or pax header may take
REGULAR = frozenset(b"0\x007S")  # tarfile's REGULAR_TYPES ("\0": old tar's regular file)
_NO_DATA = frozenset(b"123456")  # links, devices, folders, FIFOs: no data follows them
_LONG = {ord("L"): "GNU long name", ord("K"): "GNU long link"}
_PAX = {ord("x"): "pax header", ord("X"): "pax header", ord("g"): "pax global header"}
_ZEROS = bytes(BLOCK)
_OCTAL = re.compile(rb" *([0-7]*)[ \0]*")
_DECIMAL = re.compile(rb"[0-9]{1,20}")  # pax sizes and record lengths: decimal digits only

Read = Callable[[int, int], bytes]  # (offset, length) -> the file's bytes there


class Member(NamedTuple):
    """One member as `tarfile` names it: its type flag (an int, e.g. ord("0")), where its
    first header begins (a long name or pax header before it included), where its data
    begins, and its size."""

    name: str
    type: int
    start: int
    data: int
    size: int


@dataclass
class _Chain:
    """What the extended headers before one member set (the first to set a field wins)."""

    start: int
    name: str | None = None
    size: int | None = None


def walk_tar(read: Read, path: str, size: int) -> Iterator[Member]:
    """The members of the tar of `size` bytes that `read` reads, named `path` in errors."""
    return _Walker(read, path, size).members()


class _Walker:
    def __init__(self, read: Read, path: str, size: int):
        self.read, self.path, self.size = read, path, size
        self.last = "(none yet: the first header)"

    def members(self) -> Iterator[Member]:
        if self.size == 0:
            raise CorruptDataError(f"{self.path}: not a tar file: it is empty", path=self.path)
        offset = 0
        while True:
            with parsing(self.path, f"the tar header after member {self.last!r}", offset):
                member = self._next(offset)
                if member is None:
                    return
                after = self._after(member)
            self.last = member.name
            yield member
            offset = advancing(offset, after, self.path, f"the tar header at byte {offset:,}")

    def _next(self, offset: int) -> Member | None:
        """The member whose headers begin at `offset` (its extended headers, then its own);
        None at the end-of-archive block."""
        chain = _Chain(offset)
        while True:
            block = self._header_block(offset, chain)
            if block is None:
                return None
            kind, name, size = self._header(block, offset)
            data = offset + BLOCK
            if kind not in _LONG and kind not in _PAX:
                return self._member(kind, name, size, data, chain)
            after = self._extended(kind, size, data, chain)
            offset = advancing(offset, after, self.path, f"the tar header at byte {offset:,}")

    def _fail(self, offset: int, cause: str) -> CorruptDataError:
        what = f"the tar is truncated or damaged after member {self.last!r}"
        return malformed(self.path, what, cause, offset)

    def _header_block(self, offset: int, chain: _Chain) -> bytes | None:
        """The header block at `offset`, or None at the end-of-archive block."""
        left = self.size - offset
        if left <= 0:
            raise self._fail(
                offset,
                "the file ends without the tar's end-of-archive block: it was cut after "
                "that member",
            )
        block = self._read(offset, min(BLOCK, left))
        if block == _ZEROS[: len(block)]:  # tarfile ends at the first zero block, as here
            if chain.start != offset:
                raise self._fail(chain.start, "an extended header with no member after it")
            return None
        if len(block) < BLOCK:
            raise self._fail(offset, "a header cut off by the file's end")
        return block

    def _read(self, offset: int, length: int) -> bytes:
        data = self.read(offset, length)
        if len(data) != length:
            raise self._fail(offset, "the file is shorter than when it was opened")
        return data

    def _header(self, block: bytes, offset: int) -> tuple[int, str, int]:
        """(type, name, size) of the ustar header `block`; raises for a bad checksum or
        number."""
        self._check_sum(block, offset)
        kind = block[156]
        size = _number(block[124:136])
        if size is None:
            raise self._fail(
                offset,
                f"the size field of its header holds {block[124:136]!r}: not a size (a "
                "negative or malformed number)",
            )
        name = _text(block[0:100])
        if kind == 0 and name.endswith("/"):
            kind = ord("5")  # old tar's directory: a regular file named "dir/"
        if kind == ord("5"):
            name = name.rstrip("/")
        prefix = _text(block[345:500])
        if prefix and kind not in b"LKS":
            name = f"{prefix}/{name}"
        return kind, name, size

    def _check_sum(self, block: bytes, offset: int) -> None:
        """Refuses a header whose checksum field is not the sum of its bytes (either sum
        `tarfile` takes: unsigned, or signed as some old tars wrote it)."""
        found = _number(block[148:156])
        unsigned = 256 + sum(block) - sum(block[148:156])
        if found == unsigned:
            return
        if found == unsigned - 256 * sum(b >= 128 for b in block[:148] + block[156:]):
            return
        cause = f"its checksum field says {block[148:156]!r}, its bytes sum to {unsigned:o}"
        if offset == 0:
            raise malformed(self.path, "not a tar file: its first header", cause, 0)
        raise self._fail(offset, f"a damaged header follows it ({cause})")

    def _extended(self, kind: int, size: int, data: int, chain: _Chain) -> int:
        """Reads a GNU long name or a pax header into `chain`; where the next header is."""
        what = _LONG.get(kind) or _PAX[kind]
        field = f"the size field of a {what} after member {self.last!r}"
        declared(size, self.size - data, self.path, field, data - BLOCK)
        if size > MAX_EXTENDED:
            raise self._fail(
                data - BLOCK,
                f"a {what} of {size:,} bytes: more than the {MAX_EXTENDED:,} tpufeed reads",
            )
        body = self._read(data, size)
        if kind in _LONG:
            if kind == ord("L") and chain.name is None:
                chain.name = _text(body)
        else:
            records = self._pax(body, data - BLOCK)
            self._apply_pax(kind, records, chain, data - BLOCK)
        return data + _blocks(size)

    def _pax(self, body: bytes, offset: int) -> dict[str, str]:
        """The records of a pax header: `LENGTH KEYWORD=VALUE\\n`, each checked whole (what
        else goes wrong is named by the caller's `parsing`)."""
        records: dict[str, str] = {}
        at, limit = 0, len(body.rstrip(b"\0"))
        while at < limit:
            space = body.find(b" ", at, at + 21)
            length = body[at:space] if space > at else b""
            if not _DECIMAL.fullmatch(length):
                raise self._fail(offset, f"a pax record's length is {length[:21]!r}")
            end = at + int(length)
            record = body[space + 1 : end]
            if end > len(body) or not record.endswith(b"\n") or b"=" not in record:
                raise self._fail(
                    offset,
                    f"a pax record of {int(length):,} bytes at byte {offset + BLOCK + at:,}"
                    f" is not whole in its {len(body):,}-byte header (or not KEY=VALUE\\n)",
                )
            keyword, _, value = record[:-1].partition(b"=")
            records[_text(keyword, cut=False)] = _text(value, cut=False)  # the last wins
            at = advancing(at, end, self.path, f"the pax record at byte {offset + at:,}")
        return records

    def _apply_pax(self, kind: int, records: dict[str, str], chain: _Chain, offset: int) -> None:
        if any(key.startswith("GNU.sparse.") for key in records):
            raise self._sparse(offset)
        if kind == ord("g"):
            if "path" in records or "size" in records:
                raise self._fail(
                    offset,
                    "a pax global header sets the 'path' or 'size' of every member after "
                    "it: no member of a WebDataset shard has such a header",
                )
            return
        if "path" in records and chain.name is None:
            chain.name = records["path"].rstrip("/")
        if "size" in records and chain.size is None:
            if not _DECIMAL.fullmatch(records["size"].encode("utf-8", "surrogateescape")):
                raise self._fail(
                    offset, f"the pax header's 'size' record holds {records['size'][:40]!r}"
                )
            chain.size = int(records["size"])

    def _member(self, kind: int, name: str, size: int, data: int, chain: _Chain) -> Member:
        if kind == ord("S"):
            raise self._sparse(data - BLOCK)
        if chain.name is not None:
            name = chain.name.removesuffix("/") if kind == ord("5") else chain.name
        return Member(name, kind, chain.start, data, size if chain.size is None else chain.size)

    def _after(self, member: Member) -> int:
        """Where the header after `member` is: past its data, if its type carries data."""
        if member.type in _NO_DATA:
            return member.data
        if member.size > self.size - member.data:
            raise self._fail(member.data - BLOCK, f"member {member.name!r}: its data is cut off")
        after = member.data + _blocks(member.size)
        if after > self.size:
            raise self._fail(member.data - BLOCK, f"member {member.name!r}: its padding is cut off")
        return after

    def _sparse(self, offset: int) -> CorruptDataError:
        return self._fail(
            offset,
            "a GNU sparse file, which WebDataset shards do not hold; rewrite the shard with "
            "webdataset.TarWriter",
        )


def _number(data: bytes) -> int | None:
    """A ustar number field: base-256 (GNU) or octal digits between spaces and NULs; None for
    anything else, a negative number included."""
    if data[0] == 0x80:
        return int.from_bytes(data[1:], "big")
    match = _OCTAL.fullmatch(data)
    if match is None:
        return None
    return int(match.group(1) or b"0", 8)


def _text(data: bytes, cut: bool = True) -> str:
    """A name as `tarfile` decodes it: up to its first NUL, UTF-8 (bad bytes kept as escapes)."""
    if cut:
        data = data.split(b"\0", 1)[0]
    return data.decode("utf-8", "surrogateescape")


def _blocks(size: int) -> int:
    return -(-size // BLOCK) * BLOCK
