"""A MosaicML Streaming (MDS) dataset folder as a tpufeed source, read in place by index.

The folder's `index.json` lists the shards in order; record i of the source is sample i of
Streaming's own numbering (the shards' samples one after another), so the elements are the
sample dicts `StreamingDataset(...)[i]` gives (`tpufeed.sources.mds.layout` says how each
column decodes, and where images differ). A folder without `index.json` whose sub-folders hold
one each (sub-datasets, as Streaming writes them per process) is read as their shards in the
sorted order of their paths.

Local folders are read in place, every file through the one opener (`storage.opener`): regular
files only, inside the dataset folder, pinned. A gs:// folder's shards go through the shard
cache, fetched ahead in the plan's order. Compressed shards are decompressed once into local
copies (`tpufeed.sources.mds.copies`), kept under the cache folder's `mds/`; opening a dataset
removes the copies that a killed process left half written there.

>>> source = MDSSource("mds-train")  # doctest: +SKIP
>>> source[3]  # doctest: +SKIP
{'image': b'\\xff\\xd8...', 'label': 7}
"""

from __future__ import annotations

import os
from typing import Any

from tpufeed.errors import InvalidArgumentError, SourceError, SourceNotFoundError
from tpufeed.sources.built.manifest import remote_shard_url, safe_shard_path
from tpufeed.sources.mds.layout import INDEX_NAME, MAX_INDEX_BYTES, ShardInfo, parse_index
from tpufeed.sources.mds.shard import MDSShard
from tpufeed.sources.sharded import ShardedSource
from tpufeed.storage.backends import is_remote_url, list_prefix, read_range
from tpufeed.storage.cache.layout import default_cache_dir
from tpufeed.storage.cache.shard_cache import ShardCache
from tpufeed.storage.derived import remove_dead_temporaries
from tpufeed.storage.objects import RemoteObject
from tpufeed.storage.opener import open_regular
from tpufeed.storage.remote import RemoteFile

__all__ = ["MDSSource"]


class MDSSource(ShardedSource[MDSShard]):
    """The samples of the MDS dataset folder `path` (local or gs://), as one sequence of dicts.

    gs:// shards go through `cache` (default: `ShardCache()`); decompressed copies of
    compressed shards are kept under its folder (local datasets: `cache`'s folder if given,
    else the default cache folder)."""

    def __init__(self, path: str | os.PathLike, cache: ShardCache | None = None):
        self.path = os.fspath(path)
        if is_remote_url(self.path):
            cache = cache or ShardCache()
            if not cache.max_bytes:
                raise InvalidArgumentError(
                    f"{self.path}: MDS shards are read from local copies, so they need a "
                    "shard cache; cache_bytes=0 leaves none"
                )
            copies = os.path.join(cache.root, "mds")
            files = _gcs_shards(self.path.rstrip("/"), cache, copies)
        else:
            copies = os.path.join(cache.root if cache else default_cache_dir(), "mds")
            files = [
                _local_shard(root, where, info, copies)
                for root, where, info in _local_shards(self.path)
            ]
        remove_dead_temporaries(copies)  # copies a killed process was writing
        if not files:
            raise SourceError(f"{self.path}: the MDS index lists no shards", path=self.path)
        super().__init__(files)

    def _count_read(self, records: list[Any]) -> None:
        """Samples are dicts: each shard counts the bytes of the records it reads."""

    def __repr__(self) -> str:
        return f"MDSSource({self.path!r}, {len(self.files)} shards, {len(self)} samples)"


def _local_shard(root: str, where: str, info: ShardInfo, copies: str) -> MDSShard:
    """Shard `info` of the index `where`, its files inside the dataset folder `root`."""
    path = safe_shard_path(root, info.stored["basename"], info.where)
    twin = None if info.zip is None else safe_shard_path(root, info.raw["basename"], info.where)
    return MDSShard(path, info, copies, root=root, twin=twin)


def _local_shards(path: str) -> list[tuple[str, str, ShardInfo]]:
    """(dataset root, index path, shard) of every shard, in order."""
    if os.path.basename(path) == INDEX_NAME and not os.path.isdir(path):
        indexes = [path]
    elif os.path.lexists(os.path.join(path, INDEX_NAME)):  # anything there: opened, or refused
        indexes = [os.path.join(path, INDEX_NAME)]
    elif os.path.isdir(path):
        indexes = _sub_indexes(path)
    else:
        raise SourceNotFoundError(f"no such MDS dataset folder: {path}", path=path)
    root = os.path.dirname(indexes[0]) if len(indexes) == 1 else path
    shards = []
    for index_path in indexes:
        prefix = os.path.relpath(os.path.dirname(index_path), root).replace(os.sep, "/")
        prefix = "" if prefix == "." else prefix + "/"
        with os.fdopen(open_regular(index_path, root=root), "rb") as f:
            data = f.read(MAX_INDEX_BYTES + 1)
        _check_size(len(data), index_path)
        shards += [(root, index_path, info) for info in parse_index(data, index_path, prefix)]
    return shards


def _sub_indexes(path: str) -> list[str]:
    found = []
    for folder, subfolders, names in os.walk(path):
        subfolders.sort()
        if INDEX_NAME in names:
            found.append(os.path.join(folder, INDEX_NAME))
    if not found:
        raise SourceNotFoundError(
            f"{path} holds no {INDEX_NAME}, nor do its sub-folders: not an MDS dataset "
            "(MDSWriter writes index.json last, so an unfinished write has none)",
            path=path,
        )
    return sorted(found, key=lambda p: os.path.dirname(p).split(os.sep))


def _gcs_shards(root: str, cache: ShardCache, copies: str) -> list[MDSShard]:
    """The shards under the gs:// folder `root`, each object version fixed by one listing."""
    if root.endswith("/" + INDEX_NAME):
        root = root[: -len(INDEX_NAME) - 1]
    listed = {obj.url: obj for obj in list_prefix(f"{root}/", cache.retry)}
    top = f"{root}/{INDEX_NAME}"
    indexes = [top] if top in listed else sorted(u for u in listed if u.endswith(f"/{INDEX_NAME}"))
    if not indexes:
        raise SourceNotFoundError(
            f"no {INDEX_NAME} under {root}/: not an MDS dataset", path=f"{root}/{INDEX_NAME}"
        )
    files = []
    for index_url in indexes:
        obj = listed[index_url]
        _check_size(obj.size, index_url)
        data = read_range(obj, 0, obj.size, cache.retry) if obj.size else b""
        prefix = index_url[len(root) + 1 : -len(INDEX_NAME)]
        for info in parse_index(data, index_url, prefix):
            files.append(_gcs_shard(root, index_url, info, listed, cache, copies))
    return files


def _gcs_shard(
    root: str,
    index_url: str,
    info: ShardInfo,
    listed: dict[str, RemoteObject],
    cache: ShardCache,
    copies: str,
) -> MDSShard:
    url = remote_shard_url(root, info.stored["basename"], info.where)
    obj = listed.get(url)
    if obj is None:
        raise SourceNotFoundError(f"{url}: shard named in {index_url} is missing", path=url)
    if obj.size != info.stored["bytes"]:
        raise SourceError(
            f"{url}: {obj.size:,} bytes, {index_url} says {info.stored['bytes']:,} "
            "(truncated or replaced?)",
            path=url,
        )
    return MDSShard(url, info, copies, RemoteFile(obj, cache))


def _check_size(size: int, where: str) -> None:
    if size > MAX_INDEX_BYTES:
        raise SourceError(
            f"{where}: larger than {MAX_INDEX_BYTES:,} bytes; not an MDS index", path=where
        )
