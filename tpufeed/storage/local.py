"""Paths: expand a path, a list of paths or globs (local, gs:// or s3://) into a sorted, checked
list.

Local globs go through `glob`; a store's globs through one bucket listing each
(`storage.backends`).
Data files must be regular files: a FIFO blocks its reader until someone writes, a device may
never end, so both are refused by name (`open_regular` checks without blocking on them).

A file is pinned by its `FileIdentity` (device, inode, size, modification time) when first
opened; `open_regular(..., pinned=...)` refuses to reopen a path that names another file since
(a symlink or hard link swapped in, a file renamed over it) or that was truncated or rewritten.
"""

from __future__ import annotations

import glob
import os
import stat
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from tpufeed.errors import (
    CorruptDataError,
    InvalidArgumentError,
    SourceError,
    SourceNotFoundError,
)
from tpufeed.storage.threads import map_in_threads

if TYPE_CHECKING:
    from tpufeed.storage.objects import RemoteObject
    from tpufeed.storage.retry import RetryPolicy

PathsLike = str | os.PathLike | Sequence[str | os.PathLike]

_GLOB_CHARS = frozenset("*?[")
_FD_PATHS = "/proc/self/fd"  # where Linux opens a descriptor's own file again by name
_LISTING_THREADS = 16


def expand_paths(paths: PathsLike) -> list[str]:
    """Returns the files named by `paths`, each glob expanded in sorted order.

    >>> expand_paths("data/train-*.array_record")  # doctest: +SKIP
    ['data/train-00000.array_record', 'data/train-00001.array_record']
    >>> expand_paths("gs://bucket/train-*.array_record")  # doctest: +SKIP
    ['gs://bucket/train-00000.array_record', 'gs://bucket/train-00001.array_record']
    """
    return [item if isinstance(item, str) else item.url for item in resolve_paths(paths)]


def resolve_paths(paths: PathsLike, policy: RetryPolicy | None = None) -> list[str | RemoteObject]:
    """Like `expand_paths`, with each object in a store as a `RemoteObject` (its size, checksum
    and version, from the same listing that expanded the glob). `policy` bounds and retries the
    listings (default: `RetryPolicy()`)."""
    from tpufeed.storage.backends import is_remote_url, list_objects

    items = _items(paths)
    remote = [os.fspath(item) for item in items if is_remote_url(item)]
    listed: dict[str, list] = {}
    if remote:
        unique = list(dict.fromkeys(remote))
        listing = partial(list_objects, policy=policy)
        listed = dict(zip(unique, map_in_threads(listing, unique, _LISTING_THREADS)))
    files: list[str | RemoteObject] = []
    for item in items:
        path = os.fspath(item)
        if path in listed:
            files.extend(listed[path])
        else:
            files.extend(_local(path))
    return files


def _items(paths: PathsLike) -> list[str | os.PathLike]:
    if isinstance(paths, (str, os.PathLike)):
        items = [paths]
    elif isinstance(paths, Sequence):
        items = list(paths)
    else:
        raise InvalidArgumentError(
            f"paths must be a path, a glob or a list of them, got {type(paths).__name__}: {paths!r}"
        )
    if not items:
        raise InvalidArgumentError("paths is an empty list")
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise InvalidArgumentError(f"not a path: {item!r}")
    return items


def _local(path: str) -> list[str]:
    if _GLOB_CHARS.intersection(path):
        # Globs skip folders, dangling links and tpufeed's side files (TFRecord offset indexes).
        matches = sorted(
            p
            for p in glob.glob(path)
            if os.path.exists(p) and not os.path.isdir(p) and not p.endswith(".tpufeed-index")
        )
        if not matches:
            raise SourceNotFoundError(f"no file matches the glob {path!r}", path=path)
        for match in matches:
            check_regular(match)
        return matches
    if os.path.isdir(path):
        raise InvalidArgumentError(
            f"{path} is a directory; pass files or a glob such as '{path}/*.array_record'"
        )
    check_regular(path)
    return [path]


def check_regular(path: str, shown: str | None = None) -> os.stat_result:
    """`path`'s stat (links followed) if it is a regular file; raises naming `shown` (default:
    `path`) otherwise."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise SourceNotFoundError(f"no such file: {shown or path}", path=shown or path) from None
    except OSError as e:
        raise SourceError(f"{shown or path}: cannot read: {e}", path=shown or path) from e
    _refuse_irregular(st.st_mode, shown or path)
    return st


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


def changed_file(shown: str, change: str) -> CorruptDataError:
    """The error for a file that is no longer the one first opened under its name."""
    return CorruptDataError(
        f"{shown} changed since it was first opened: {change}. tpufeed reads only the file it "
        "first opened; open the dataset again to read the file now there",
        path=shown,
    )


def open_regular(path: str, shown: str | None = None, pinned: FileIdentity | None = None) -> int:
    """A descriptor of `path` open for reading, if it is a regular file; anything else is
    refused without blocking on it (the open does not wait for a FIFO's writer). With
    `pinned`, the file opened must be that one, unchanged (`changed_file` otherwise). Errors
    name `shown` (default: `path`)."""
    shown = shown or path
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise SourceNotFoundError(f"no such file: {shown}", path=shown) from None
    except OSError as e:  # a socket cannot be opened at all: say what it is
        check_regular(path, shown)
        raise SourceError(f"{shown}: cannot open: {e}", path=shown) from e
    try:
        st = os.fstat(fd)
        _refuse_irregular(st.st_mode, shown)
        change = None if pinned is None else FileIdentity.of(st).change_from(pinned)
        if change is not None:
            raise changed_file(shown, change)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def path_of_descriptor(fd: int, path: str) -> str:
    """A name that opens the very file `fd` has open (`/proc/self/fd/N` on Linux), for a library
    that opens files by name only; `path` where the system has no such names."""
    return f"{_FD_PATHS}/{fd}" if os.path.isdir(_FD_PATHS) else path


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
