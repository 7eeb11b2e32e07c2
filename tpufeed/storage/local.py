"""Paths: expand a path, a list of paths or globs (local, gs:// or s3://) into a sorted, checked
list.

Local globs go through `glob`; a store's globs through one bucket listing each
(`storage.backends`).
Every path must name a regular file (`storage.opener.check_regular`, which opens nothing):
a FIFO, a device or a folder among the paths is refused by name. Files are then opened through
`storage.opener`.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

from tpufeed.errors import (
    InvalidArgumentError,
    SourceNotFoundError,
)
from tpufeed.storage.opener import check_regular
from tpufeed.storage.threads import map_in_threads

if TYPE_CHECKING:
    from tpufeed.storage.objects import RemoteObject
    from tpufeed.storage.retry import RetryPolicy

PathsLike = str | os.PathLike | Sequence[str | os.PathLike]

_GLOB_CHARS = frozenset("*?[")
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


def _side_file(path: str) -> bool:
    return path.endswith(".tpufeed-index") or ".tpufeed-index.tmp-" in os.path.basename(path)


def _local(path: str) -> list[str]:
    if _GLOB_CHARS.intersection(path):
        # Globs skip folders, dangling links and tpufeed's side files (TFRecord offset indexes,
        # tar indexes) with their temporaries (a writer's, live or dead).
        matches = sorted(
            p
            for p in glob.glob(path)
            if os.path.exists(p) and not os.path.isdir(p) and not _side_file(p)
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
