"""ArrayRecord files as a tpufeed source: checked at open, read in batches, picklable.

`ArrayRecordSource` is the records of many files as one sequence; each file is an
`ArrayRecordFile` (`tpufeed.sources.array_record.file`: checked before array_record's reader is
trusted with it, `tpufeed.sources.array_record.structure`), and `write_array_records` writes one
(`tpufeed.sources.array_record.writer`). gs:// files are read from their copies in the shard
cache (`tpufeed.storage.cache.shard_cache`), fetched when first needed or ahead of time.

>>> source = ArrayRecordSource("data/train-*.array_record")  # doctest: +SKIP
>>> source.__getitems__([3, 1, 4])  # doctest: +SKIP
[b'...', b'...', b'...']
"""

from __future__ import annotations

from tpufeed.errors import InvalidArgumentError
from tpufeed.sources.array_record.file import ArrayRecordFile
from tpufeed.sources.array_record.writer import write_array_records
from tpufeed.sources.sharded import ShardedSource
from tpufeed.storage.cache.shard_cache import ShardCache
from tpufeed.storage.local import PathsLike, resolve_paths
from tpufeed.storage.objects import RemoteObject
from tpufeed.storage.remote import RemoteFile

__all__ = ["ArrayRecordFile", "ArrayRecordSource", "write_array_records"]


class ArrayRecordSource(ShardedSource[ArrayRecordFile]):
    """The records of the ArrayRecord files named by a path, a glob or a list, as one sequence.

    gs:// files go through `cache` (default: `ShardCache()`, the default directory and limit).

    >>> source = ArrayRecordSource(["a.array_record", "b-*.array_record"])  # doctest: +SKIP
    >>> len(source), source[0]  # doctest: +SKIP
    """

    def __init__(self, paths: PathsLike, cache: ShardCache | None = None):
        files = []
        for item in resolve_paths(paths, cache.retry if cache else None):
            if isinstance(item, RemoteObject):
                cache = cache or ShardCache()
                if cache.max_bytes == 0:
                    raise InvalidArgumentError(
                        f"{item.url}: ArrayRecord files are read from local copies, so they need "
                        "a shard cache; cache_bytes=0 leaves none"
                    )
                files.append(ArrayRecordFile(item.url, RemoteFile(item, cache)))
            else:
                files.append(ArrayRecordFile(item))
        super().__init__(files)
