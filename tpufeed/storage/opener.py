"""The one way tpufeed opens a file it reads: shards, indexes, decompressed copies, cache entries
and manifests alike.

`open_regular` gives a descriptor only for a regular file. Anything else is refused without
blocking on it: a FIFO's open would wait for a writer, a device may never end, a folder is not
data. With `root`, the file opened must lie inside that folder once every symlink is followed
(the check reads the descriptor's own path, so a link swapped in after the open cannot slip
past it). With `pinned`, it must be the very file first opened under that name, unchanged:
its `FileIdentity` (device, inode, size, modification time) is compared at every reopen.

>>> fd, pin = open_pinned("data/train-00000.tfrecord")  # doctest: +SKIP
>>> os.close(open_regular("data/train-00000.tfrecord", pinned=pin))  # doctest: +SKIP
"""

from __future__ import annotations

import errno
import os
import stat
from typing import NamedTuple

from tpufeed.errors import CorruptDataError, SourceError, SourceNotFoundError

__all__ = [
    "FileIdentity",
    "changed_file",
    "check_regular",
    "open_pinned",
    "open_regular",
    "path_of_descriptor",
    "real_path_of",
]

_FD_PATHS = "/proc/self/fd"  # where Linux names a descriptor's own file


class FileIdentity(NamedTuple):
    """What tells one local file from another, and a changed file from itself: the file a path
    named when it was first opened, compared whenever the path is opened again."""

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def change_from(self, pinned: FileIdentity) -> str | None:
        """How this file differs from `pinned` (the one first opened), or None if it does not."""
        if self[:2] != pinned[:2]:
            return (
                "it is another file now (another inode: a file renamed over it, or a symlink "
                "or hard link to another file put in its place)"
            )
        if self.size != pinned.size:
            return f"it was truncated or rewritten ({pinned.size:,} bytes then, {self.size:,} now)"
        if self.mtime_ns != pinned.mtime_ns:
            return "it was rewritten in place (its modification time changed)"
        return None

    def key(self) -> str:
        """The identity as text, for naming what is derived from this file."""
        return f"{self.device}:{self.inode}:{self.size}:{self.mtime_ns}"


def changed_file(shown: str, change: str) -> CorruptDataError:
    """The error for a file that is no longer the one first opened under its name."""
    return CorruptDataError(
        f"{shown} changed since it was first opened: {change}. tpufeed reads only the file it "
        "first opened; open the dataset again to read the file now there",
        path=shown,
    )


def check_regular(path: str, shown: str | None = None) -> os.stat_result:
    """`path`'s stat (links followed) if it is a regular file; raises naming `shown` (default:
    `path`) otherwise. Opens nothing, so it never blocks."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise SourceNotFoundError(f"no such file: {shown or path}", path=shown or path) from None
    except OSError as e:
        raise SourceError(f"{shown or path}: cannot read: {e}", path=shown or path) from e
    _refuse_irregular(st.st_mode, shown or path)
    return st


def open_regular(
    path: str,
    shown: str | None = None,
    pinned: FileIdentity | None = None,
    root: str | None = None,
    links: bool = True,
) -> int:
    """A descriptor of `path` open for reading, if it is a regular file; anything else is
    refused without blocking on it. With `root`, the file must lie inside that folder (links
    followed); with `pinned`, it must be that file, unchanged (`changed_file` otherwise); with
    `links=False`, a symlink in its place is refused (for files tpufeed writes itself, which
    are never links: a check that costs no call of its own). Errors name `shown` (default:
    `path`)."""
    shown = shown or path
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise SourceNotFoundError(f"no such file: {shown}", path=shown) from None
    except OSError as e:  # a socket cannot be opened at all: say what it is
        if e.errno == errno.ELOOP and not links:
            raise SourceError(
                f"{shown} is a symlink, not the regular file tpufeed wrote there", path=shown
            ) from None
        check_regular(path, shown)
        raise SourceError(f"{shown}: cannot open: {e}", path=shown) from e
    try:
        st = os.fstat(fd)
        _refuse_irregular(st.st_mode, shown)
        if root is not None:
            _refuse_outside(fd, path, root, shown)
        change = None if pinned is None else FileIdentity.of(st).change_from(pinned)
        if change is not None:
            raise changed_file(shown, change)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_pinned(
    path: str, shown: str | None = None, root: str | None = None, links: bool = True
) -> tuple[int, FileIdentity]:
    """`open_regular` for a first open: the descriptor and the identity to pin."""
    fd = open_regular(path, shown, root=root, links=links)
    try:
        return fd, FileIdentity.of(os.fstat(fd))
    except BaseException:
        os.close(fd)
        raise


def path_of_descriptor(fd: int, path: str) -> str:
    """A name that opens the very file `fd` has open (`/proc/self/fd/N` on Linux), for a library
    that opens files by name only; `path` where the system has no such names."""
    return f"{_FD_PATHS}/{fd}" if os.path.isdir(_FD_PATHS) else path


def real_path_of(fd: int, path: str) -> str:
    """Where the file `fd` has open really lies, every link followed: read from the descriptor
    itself where the system can say (so no link swapped in since the open can change it)."""
    try:
        return os.readlink(f"{_FD_PATHS}/{fd}")
    except OSError:
        return os.path.realpath(path)


def _refuse_outside(fd: int, path: str, root: str, shown: str) -> None:
    real_root = os.path.realpath(root)
    real = real_path_of(fd, path)
    if os.path.commonpath([real_root, real]) != real_root:
        raise CorruptDataError(
            f"{shown} leads to {real}, outside the dataset root {root}: tpufeed reads only "
            "files inside the dataset's own folder (a symlink out of it is refused)",
            path=shown,
        )


_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


def _refuse_irregular(mode: int, shown: str) -> None:
    if stat.S_ISREG(mode):
        return
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    raise SourceError(
        f"{shown} is {kind}, not a regular file: data files must be regular "
        "files (reading this one could block forever or never end)",
        path=shown,
    )
