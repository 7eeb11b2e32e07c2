"""The decompressed copy of a gzip-compressed tar shard (`.tgz`, `.tar.gz`): a derived file
(`storage.derived`), which the shard's samples are then read from in place.

A gzip tar cannot be read by offset, so it is decompressed once, into `<cache dir>/wds/`,
under a name made of the shard's whole identity (a local file's device, inode, size and
modification time; an object's generation or ETag): a shard replaced by another, even of the
same size and time, never finds the old one's copy. The stream is decompressed a bounded piece
at a time (`storage.bounded.decompressed`): gzip declares no size of its own (its trailer holds
the size modulo 4 GiB), so the bound is what deflate can make of the shard's bytes at most
(`MAX_RATIO` to 1); gzip's own CRC-32 and length of every member are checked as it ends. The
copy is written atomically with a CRC32C trailer and checked on its first use in each process;
a bad one (damaged, cut, a FIFO or a link in its place) is removed with a warning and made
again. A copy a killed process left half written is removed the next time the folder is used.
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO, cast

from tpufeed.errors import SourceError, TpufeedError
from tpufeed.storage.bounded import decompressed
from tpufeed.storage.derived import (
    Derived,
    derived_name,
    open_derived,
    remove_dead_temporaries_once,
    write_derived,
)
from tpufeed.storage.opener import FileIdentity

__all__ = ["COPY_SUFFIX", "GZIP_MAGIC", "GZIP_SUFFIXES", "MAX_RATIO", "tar_copy"]

GZIP_MAGIC = b"\x1f\x8b"
GZIP_SUFFIXES = (".tgz", ".tar.gz")  # an object in a store is told by its name (no read)
MAX_RATIO = 1032  # deflate's most: a 258-byte match in 2 bits
COPY_SUFFIX = ".tar"


def tar_copy(
    shown: str, version: FileIdentity | str, fd: int, size: int, folder: str
) -> tuple[str, Derived]:
    """The path of the checked, decompressed copy of the gzip tar `shown` (a path or URL) as
    it is now (`version`), and the copy open for reading: found in `folder`, or made from the
    `size` bytes of the descriptor `fd`."""
    copy = os.path.join(folder, derived_name(shown, version, COPY_SUFFIX))
    what = f"the decompressed copy of {shown}"
    found = open_derived(copy, what)
    if found is not None:
        return copy, found
    try:
        os.makedirs(folder, exist_ok=True)
        remove_dead_temporaries_once(folder)
        write_derived(copy, lambda out: _decompress(out, fd, size, shown))
    except OSError as error:
        if isinstance(error, TpufeedError):
            raise
        raise SourceError(
            f"{copy}: {what} cannot be written: {error} (a full disk? set cache_dir= to a "
            "folder with room)",
            path=copy,
        ) from error
    found = open_derived(copy, what)
    if found is None:
        raise SourceError(f"{copy}: {what} cannot be read back once written", path=copy)
    return copy, found


def _decompress(out: Any, fd: int, size: int, shown: str) -> None:
    source = cast(BinaryIO, _Prefix(fd, size))  # `read` is all a decompressor calls
    for piece in decompressed("gz", source, MAX_RATIO * size, shown, exact=False):
        out.write(piece)


class _Prefix:
    """The first `size` bytes of the file open at `fd`, read in order by offset."""

    def __init__(self, fd: int, size: int):
        self.fd, self.position, self.end = fd, 0, size

    def read(self, n: int = -1) -> bytes:
        left = self.end - self.position
        data = os.pread(self.fd, left if n < 0 else min(n, left), self.position)
        self.position += len(data)
        return data
