"""A cache directory that is full, read-only or not a directory, as errors naming the fix.

Raw `OSError`s from writing the cache say neither which cache nor what to do; these name the
cache directory, the shard being written, and the setting that moves the cache elsewhere.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator

from tpufeed.errors import InvalidArgumentError, SourceError
from tpufeed.storage.cache.layout import CACHE_DIR_ENV, free_bytes

__all__ = ["check_not_a_file", "disk_errors"]

_NO_SPACE = {errno.ENOSPC, errno.EDQUOT}
_NOT_WRITABLE = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EEXIST}
_ELSEWHERE = f"point cache_dir= (or ${CACHE_DIR_ENV}) at"


def check_not_a_file(root: str) -> None:
    """Refuses a cache directory that is, or lies under, something other than a directory."""
    path = root
    while True:
        try:  # one stat a path: another thread or process may be creating the directory now
            if stat.S_ISDIR(os.stat(path).st_mode):
                return
        except (FileNotFoundError, NotADirectoryError):  # a parent tells
            if not os.path.islink(path):  # missing: made on first use, if its parents allow
                if os.path.dirname(path) == path:
                    return
                path = os.path.dirname(path)
                continue
        raise InvalidArgumentError(
            f"the shard cache directory {root} cannot be used: {path} is a file, not a "
            f"directory; {_ELSEWHERE} a directory"
        )


@contextlib.contextmanager
def disk_errors(root: str, max_bytes: int, url: str | None) -> Iterator[None]:
    """Turns a full or unwritable disk met while writing `url` into the cache at `root` into a
    SourceError naming both and the fix; other errors pass unchanged."""
    try:
        yield
    except OSError as e:
        shard = f"{url}: " if url is not None else ""
        where = f" ({e.filename})" if e.filename else ""
        if e.errno in _NO_SPACE:
            raise SourceError(
                f"{shard}no space left on the disk of the shard cache at {root} while writing "
                f"{'it' if url is not None else 'to it'}{where}: {free_bytes(root):,} bytes free "
                f"there, cache_bytes is {max_bytes:,}; free disk space, lower cache_bytes, or "
                f"{_ELSEWHERE} a disk with room",
                path=url or root,
            ) from e
        if e.errno in _NOT_WRITABLE:
            check_not_a_file(root)
            raise SourceError(
                f"{shard}cannot write to the shard cache directory {root}{where}: {e.strerror}; "
                f"make it writable, or {_ELSEWHERE} a writable directory",
                path=url or root,
            ) from e
        raise
