"""Local paths: expand a path, a list of paths or globs into a sorted, checked file list."""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

from tpufeed.errors import InvalidArgumentError, SourceNotFoundError

PathsLike = str | os.PathLike | Sequence[str | os.PathLike]

_GLOB_CHARS = frozenset("*?[")


def expand_paths(paths: PathsLike) -> list[str]:
    """Returns the files named by `paths`, each glob expanded in sorted order.

    >>> expand_paths("data/train-*.array_record")  # doctest: +SKIP
    ['data/train-00000.array_record', 'data/train-00001.array_record']
    """
    if isinstance(paths, (str, os.PathLike)):
        items = [paths]
    elif isinstance(paths, Sequence):
        items = list(paths)
    else:
        raise InvalidArgumentError(
            f"paths must be a path, a glob or a list of them, got {type(paths).__name__}: {paths!r}")
    if not items:
        raise InvalidArgumentError("paths is an empty list")
    files: list[str] = []
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise InvalidArgumentError(f"not a path: {item!r}")
        path = os.fspath(item)
        if path.startswith("gs://"):
            raise SourceNotFoundError(
                f"{path}: gs:// paths are read through the GCS shard cache, which this version "
                "of tpufeed does not include yet; copy the files to local disk", path=path)
        if _GLOB_CHARS.intersection(path):
            # Globs skip tpufeed's own side files (TFRecord offset indexes) next to the data.
            matches = sorted(p for p in glob.glob(path)
                             if os.path.isfile(p) and not p.endswith(".tpufeed-index"))
            if not matches:
                raise SourceNotFoundError(f"no file matches the glob {path!r}", path=path)
            files.extend(matches)
        elif os.path.isfile(path):
            files.append(path)
        elif os.path.isdir(path):
            raise InvalidArgumentError(
                f"{path} is a directory; pass files or a glob such as '{path}/*.array_record'")
        else:
            raise SourceNotFoundError(f"no such file: {path}", path=path)
    return files
