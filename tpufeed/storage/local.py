"""Paths: expand a path, a list of paths or globs (local or gs://) into a sorted, checked list.

Local globs go through `glob`; gs:// globs through one bucket listing each (`storage.gcs`).
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from tpufeed.errors import InvalidArgumentError, SourceNotFoundError

if TYPE_CHECKING:
    from tpufeed.storage.gcs import GcsObject

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


def resolve_paths(paths: PathsLike) -> list[str | GcsObject]:
    """Like `expand_paths`, with each gs:// object as a `GcsObject` (its size, CRC32C and
    generation, from the same listing that expanded the glob)."""
    items = _items(paths)
    remote = [os.fspath(item) for item in items if _is_gcs(item)]
    listed: dict[str, list] = {}
    if remote:
        from tpufeed.storage.gcs import list_objects

        unique = list(dict.fromkeys(remote))
        with ThreadPoolExecutor(min(_LISTING_THREADS, len(unique))) as pool:
            listed = dict(zip(unique, pool.map(list_objects, unique)))
    files: list[str | GcsObject] = []
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
            f"paths must be a path, a glob or a list of them, got {type(paths).__name__}: {paths!r}")
    if not items:
        raise InvalidArgumentError("paths is an empty list")
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise InvalidArgumentError(f"not a path: {item!r}")
    return items


def _is_gcs(item: str | os.PathLike) -> bool:
    return isinstance(item, str) and item.startswith("gs://")


def _local(path: str) -> list[str]:
    if _GLOB_CHARS.intersection(path):
        # Globs skip tpufeed's own side files (TFRecord offset indexes) next to the data.
        matches = sorted(p for p in glob.glob(path)
                         if os.path.isfile(p) and not p.endswith(".tpufeed-index"))
        if not matches:
            raise SourceNotFoundError(f"no file matches the glob {path!r}", path=path)
        return matches
    if os.path.isfile(path):
        return [path]
    if os.path.isdir(path):
        raise InvalidArgumentError(
            f"{path} is a directory; pass files or a glob such as '{path}/*.array_record'")
    raise SourceNotFoundError(f"no such file: {path}", path=path)
