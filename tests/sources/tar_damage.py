"""WebDataset shards written by webdataset's own `TarWriter`, and the ways the tar tests damage
them: a header field rewritten (its checksum made right again, or not), bytes inserted, a cut.

`members(path)` lists an undamaged shard's members as Python's `tarfile` reads them: where each
member's headers begin (its GNU long name or pax header first, if any), where its data begins,
its size and its name.
"""

from __future__ import annotations

import io
import os
import tarfile
from typing import NamedTuple

import pytest

wds = pytest.importorskip("webdataset")

BLOCK = 512
SIZE_FIELD = slice(124, 136)
CHECKSUM_FIELD = slice(148, 156)


class Member(NamedTuple):
    start: int  # its first header (a GNU long name or a pax header, if it has one)
    data: int  # its data; its own ustar header is the block before
    size: int
    name: str


def samples(prefix: str, count: int, long: bool = False) -> list[dict]:
    """`count` samples whose sizes do not depend on `prefix` (one character)."""
    stem = f"{prefix}/" + ("very-long-directory-name/" * 5 if long else "")
    return [
        {
            "__key__": f"{stem}{i:05d}",
            "txt": f"text {i:04d} of {prefix}",
            "cls": str(i % 7),
            "bin": bytes([i % 251]) * (100 + 37 * (i % 5)),
        }
        for i in range(count)
    ]


KINDS = ("wds", "wds-long", "gnu", "ustar")


def write_shard(path, prefix: str = "a", count: int = 12, kind: str = "wds") -> str:
    """A shard of `samples(prefix, count)`. "wds": written by `webdataset.TarWriter`, whose
    float mtime gives every member a pax header; "wds-long": the same with keys over 100
    characters (a pax `path`); "gnu" and "ustar": those keys written by `tarfile` in GNU
    format (GNU long names) and in POSIX ustar (the name prefix), with whole-second times."""
    chosen = samples(prefix, count, long=kind != "wds")
    if kind.startswith("wds"):
        with wds.TarWriter(str(path), mtime=1_700_000_000.25) as sink:
            for sample in chosen:
                sink.write(sample)
        return str(path)
    form = tarfile.GNU_FORMAT if kind == "gnu" else tarfile.USTAR_FORMAT
    with tarfile.open(path, "w", format=form) as tar:
        for sample in chosen:
            for field in sorted(set(sample) - {"__key__"}):
                value = sample[field]
                data = value if isinstance(value, bytes) else value.encode()
                info = tarfile.TarInfo(f"{sample['__key__']}.{field}")
                info.size, info.mtime = len(data), 1_700_000_000
                tar.addfile(info, io.BytesIO(data))
    return str(path)


def members(path: str) -> list[Member]:
    with tarfile.open(path) as tar:
        return [Member(m.offset, m.offset_data, m.size, m.name) for m in tar if m.isreg()]


def fix_checksum(data: bytearray, header: int) -> None:
    """Makes the checksum of the header at byte `header` right for its bytes."""
    block = data[header : header + BLOCK]
    block[CHECKSUM_FIELD] = b" " * 8
    data[header + 148 : header + 156] = b"%06o\0 " % sum(block)


def rewrite(path: str, at: int, new: bytes, header: int | None = None) -> None:
    """Puts `new` at byte `at` of `path`; with `header`, then fixes that header's checksum."""
    with open(path, "rb") as f:
        data = bytearray(f.read())
    data[at : at + len(new)] = new
    if header is not None:
        fix_checksum(data, header)
    with open(path, "wb") as f:
        f.write(data)


def base256(value: int) -> bytes:
    """A 12-byte size field in GNU's base-256 form (negative values as two's complement)."""
    if value < 0:
        return bytes([0xFF]) + (value % 256**11).to_bytes(11, "big")
    return bytes([0x80]) + value.to_bytes(11, "big")


def cut(path: str, keep: int) -> None:
    os.truncate(path, keep)
