"""The local, decompressed copy of a compressed MDS shard: a derived file (`storage.derived`).

A copy is named by its compressed shard's whole identity (a local file's device, inode, size and
modification time; an object's generation or ETag), so a shard replaced by another, even one of
the same size and time, never finds the old shard's copy. It is made once: the compressed file,
its hash checked, is streamed through a decompressor bounded by the raw size the index declares
(a bomb stops one 1 MiB piece past it, in memory and on disk), hashed against the raw file's
hash on the way, and written atomically with a CRC32C trailer. Processes that need it at once
make it once: they wait for the one that holds the lock beside it (at most `LOCK_WAIT_S`, then
they make it themselves; the rename keeps one whole copy). It is opened through `open_derived`:
checked against its CRC32C on its first use in each process, and a bad one (damaged, cut, or a
FIFO in its place) is removed with a warning and made again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, BinaryIO, cast

from tpufeed.errors import SourceError, TpufeedError
from tpufeed.sources.mds.hashes import ExpectedHash, checked_hash, descriptor_chunks
from tpufeed.sources.mds.layout import ShardInfo
from tpufeed.storage.bounded import decompressed
from tpufeed.storage.derived import Derived, derived_name, open_derived, write_derived
from tpufeed.storage.opener import FileIdentity

__all__ = ["LOCK_WAIT_S", "decompressed_copy"]

LOCK_WAIT_S = 60.0
_FIRST_PAUSE_S = 0.005
_LONGEST_PAUSE_S = 0.25


def decompressed_copy(
    info: ShardInfo,
    shown: str,
    version: FileIdentity | str,
    copies_dir: str,
    open_compressed: Callable[[], AbstractContextManager[int]],
) -> tuple[str, Derived]:
    """The checked copy of shard `shown` (path or URL) as it is now (`version`), open for
    reading, and its path: found in `copies_dir`, or made from the descriptor
    `open_compressed()` gives."""
    copy = os.path.join(copies_dir, derived_name(shown, version, ".raw"))
    what = f"the decompressed copy of {shown}"
    found = _whole(copy, what, info)
    if found is not None:
        return copy, found
    os.makedirs(copies_dir, exist_ok=True)
    with _copy_lock(copy):
        found = _whole(copy, what, info)  # made meanwhile by the process that held the lock
        if found is None:
            with open_compressed() as fd:
                _write(copy, fd, info, shown)
            found = _whole(copy, what, info)
    if found is None:
        raise SourceError(f"{copy}: {what} cannot be read back once written", path=copy)
    return copy, found


def _whole(copy: str, what: str, info: ShardInfo) -> Derived | None:
    """The copy if it is there, passes its check and holds the raw size the index says."""
    found = open_derived(copy, what)
    if found is None or found.size == info.raw["bytes"]:
        return found
    os.close(found.fd)  # written from this very shard, for an index that said another size
    with contextlib.suppress(FileNotFoundError):
        os.unlink(copy)
    warnings.warn(
        f"{copy}: {what} holds {found.size:,} bytes, the index says {info.raw['bytes']:,}; "
        "removed, it is made again",
        stacklevel=3,
    )
    return None


def _write(copy: str, fd: int, info: ShardInfo, shown: str) -> None:
    """Decompresses the compressed shard open at `fd` into `copy`, every check passed first:
    its hash, the bound on what it decompresses to, the raw file's hash."""
    assert info.zip is not None and info.algorithm is not None  # a compressed shard's
    algorithm, raw_size, zip_size = info.algorithm, info.raw["bytes"], info.zip["bytes"]
    checked_hash(info.zip["hashes"], descriptor_chunks(fd, zip_size), shown)
    raw_hash = ExpectedHash(info.raw["hashes"], f"{shown} (decompressed)")

    def write(out: Any) -> None:
        source = cast(BinaryIO, _Prefix(fd, zip_size))  # `read` is all a decompressor calls
        for piece in decompressed(algorithm, source, raw_size, shown):
            raw_hash.update(piece)
            out.write(piece)
        raw_hash.check()

    try:
        write_derived(copy, write)
    except OSError as error:
        if isinstance(error, TpufeedError):
            raise
        raise SourceError(
            f"{copy}: the decompressed copy of {shown} cannot be written: {error} (a full "
            "disk? set cache_dir= to a folder with room)",
            path=copy,
        ) from error


class _Prefix:
    """The first `size` bytes of the file open at `fd`, read in order by offset: a
    decompressor's input, which never reads past what the index says the file holds."""

    def __init__(self, fd: int, size: int):
        self.fd, self.position, self.end = fd, 0, size

    def read(self, n: int = -1) -> bytes:
        left = self.end - self.position
        data = os.pread(self.fd, left if n < 0 else min(n, left), self.position)
        self.position += len(data)
        return data


@contextlib.contextmanager
def _copy_lock(copy: str) -> Iterator[None]:
    """Held while this process makes `copy`: by the others, until `LOCK_WAIT_S` has passed."""
    path = copy + ".lock"
    flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)  # O_RDWR: even a FIFO opens at once (and is refused)
    except OSError as error:
        raise SourceError(f"{path}: cannot open the lock of a copy: {error}", path=path) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SourceError(
                f"{path}: the lock of a decompressed copy is not a regular file; remove it",
                path=path,
            )
        _wait_for(fd, path)
        yield
    finally:
        os.close(fd)  # the lock goes with it


def _wait_for(fd: int, path: str) -> None:
    deadline, pause = time.monotonic() + LOCK_WAIT_S, _FIRST_PAUSE_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                warnings.warn(
                    f"{path}: another process has held it for {LOCK_WAIT_S:g} s (stopped?); "
                    "this one makes the copy too",
                    stacklevel=4,
                )
                return
            time.sleep(pause)
            pause = min(2 * pause, _LONGEST_PAUSE_S)
