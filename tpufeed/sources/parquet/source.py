"""Parquet files as a tpufeed source: rows by global index, each row group decoded once.

A file's footer gives the row count of every row group up front (no data is read to count), so
row `i` maps to (file, row group, row within it). A read decodes the row groups it needs (only
the selected `columns`) with pyarrow, keeps them in an LRU of decoded row groups shared by the
source's files (`decoded_bytes` per process, default 256 MiB), and takes the rows asked for
from them; elements follow `tpufeed.sources._arrow_rows` (numpy values, `str`, None for null).

The cost of random access: a globally shuffled epoch touches row groups in random order, so a
row group is decoded again whenever it left the LRU since its last use. While the decoded
dataset fits in `decoded_bytes`, each row group is decoded about once per epoch; beyond that,
expect about one decode per row read, each costing the whole row group. So for shuffled
training either write small row groups (`pyarrow.parquet.write_table(..., row_group_size=1000)`
or so: a decode then costs little), or shuffle within windows of files
(`Dataset.shuffle(seed, window=K)`) with `decoded_bytes` large enough for K files' row groups.

`gs://` files are read through the shard cache (`cache`), their footers by ranged reads (no
whole-file download to count rows); with a cache of 0 bytes, row groups are read as ranged GETs.

>>> source = ParquetSource("data/train-*.parquet", columns=["text", "label"])  # doctest: +SKIP
>>> source[3]  # doctest: +SKIP
{'text': 'a review', 'label': np.int64(1)}
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from tpufeed.errors import (
    CorruptDataError,
    InvalidArgumentError,
    SourceError,
    SourceNotFoundError,
    TpufeedError,
    missing_dependency,
)
from tpufeed.observe import counts
from tpufeed.sources.sharded import ShardedSource, checked_indices
from tpufeed.storage.backends import is_remote_url
from tpufeed.storage.cache.shard_cache import ShardCache
from tpufeed.storage.local import PathsLike, resolve_paths
from tpufeed.storage.objects import RemoteObject
from tpufeed.storage.opener import FileIdentity, open_regular, path_of_descriptor
from tpufeed.storage.remote import RemoteFile
from tpufeed.storage.threads import map_in_threads

try:
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError as error:  # pragma: no cover - depends on the environment
    raise missing_dependency("pyarrow", "parquet") from error

from tpufeed.sources._arrow_rows import rows_of
from tpufeed.sources.parquet._row_groups import DEFAULT_DECODED_BYTES, DecodedRowGroups
from tpufeed.sources.parquet.footer import check_footer

__all__ = ["ParquetFile", "ParquetSource", "iter_parquet_rows"]

_OPEN_THREADS = 16
_ROWS_PER_PIECE = 1024  # iter_parquet_rows converts this many rows at a time


def check_columns(columns: Sequence[str] | None) -> list[str] | None:
    """`columns` as a list of distinct names, or None for all; an error quoting it otherwise."""
    if columns is None:
        return None
    if isinstance(columns, (str, bytes)) or not isinstance(columns, Sequence):
        raise InvalidArgumentError(
            f"columns must be a list of column names or None, got {columns!r}"
        )
    names = list(columns)
    if not names:
        raise InvalidArgumentError("columns is an empty list; pass None for every column")
    for name in names:
        if not isinstance(name, str):
            raise InvalidArgumentError(f"columns must be strings, got {name!r} in {names!r}")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise InvalidArgumentError(f"columns names {repeated} more than once: {names!r}")
    return names


class ParquetFile:
    """One Parquet file read by local row index. Picklable: it holds no open handle (each
    row-group read opens the file with the footer already parsed), only its footer."""

    def __init__(
        self,
        path: str | os.PathLike,
        columns: Sequence[str] | None = None,
        remote: RemoteFile | None = None,
        decoded: DecodedRowGroups | None = None,
        pinned: FileIdentity | None = None,
    ):
        self.path = os.fspath(path)
        if remote is None and is_remote_url(self.path):
            remote = RemoteFile.open(self.path)
        self.remote = remote
        self.pinned = pinned  # a local file's identity when first opened
        self.metadata = self._read_metadata()
        self.schema = self.metadata.schema.to_arrow_schema()
        names = list(self.schema.names)
        wanted = check_columns(columns)
        if wanted is not None:
            missing = [name for name in wanted if name not in names]
            if missing:
                raise InvalidArgumentError(
                    f"{self.path} has no column {', '.join(map(repr, missing))}"
                    f"; its columns are {names}"
                )
        elif not names:
            raise SourceError(f"{self.path}: the Parquet file has no columns", path=self.path)
        self.columns = wanted if wanted is not None else names
        rows = [self.metadata.row_group(g).num_rows for g in range(self.metadata.num_row_groups)]
        self.row_group_starts = np.concatenate([[0], np.cumsum(rows, dtype=np.int64)]).astype(
            np.int64
        )
        self._decoded = decoded if decoded is not None else DecodedRowGroups()

    def _read_metadata(self) -> Any:
        try:
            if self.remote is None:
                with os.fdopen(open_regular(self.path, pinned=self.pinned), "rb") as f:
                    self.pinned = FileIdentity.of(os.fstat(f.fileno()))
                    metadata = pq.read_metadata(path_of_descriptor(f.fileno(), self.path))
            elif self.remote.cache.contains(self.remote.obj):
                with self._cached_copy() as local:
                    metadata = pq.read_metadata(local)
            else:
                metadata = pq.ParquetFile(RangedFile(self.remote)).metadata
        except TpufeedError:
            raise
        except Exception as error:
            raise CorruptDataError(
                f"{self.path}: not a readable Parquet file: {error}", path=self.path
            ) from error
        check_footer(metadata, self.path)
        return metadata

    @contextlib.contextmanager
    def _cached_copy(self) -> Iterator[str]:
        """A name of the verified cached copy, open through the cache's opener, held inside."""
        remote = self._remote()
        with remote.pinned() as local, os.fdopen(remote.open_copy(), "rb") as f:
            yield path_of_descriptor(f.fileno(), local)

    def _remote(self) -> RemoteFile:
        if self.remote is None:
            raise TpufeedError(f"{self.path} is a local file: it has no cached copy")
        return self.remote

    def __len__(self) -> int:
        return int(self.row_group_starts[-1])

    @property
    def num_row_groups(self) -> int:
        return int(self.metadata.num_row_groups)

    def read(self, indices: np.ndarray) -> list[Any]:  # dicts, where RecordFile says bytes
        """The rows at local `indices` (any order, repeats allowed), in that order: the row
        groups they fall in are decoded (or found decoded) once, then their rows taken."""
        n = len(self)
        idx = checked_indices(
            indices, n, lambda bad: f"{self.path}: row {bad} is out of range for a file of {n} rows"
        )
        if not idx.size:
            return []
        starts = self.row_group_starts
        groups = np.searchsorted(starts, idx, side="right") - 1
        rows = idx - starts[groups]
        # Runs of consecutive rows of one group, in the order asked: one zero-copy slice each
        # (Arrow's take on a table costs about as much as copying the table).
        cuts = np.flatnonzero((np.diff(groups) != 0) | (np.diff(rows) != 1)) + 1
        heads = np.concatenate([[0], cuts])
        lengths = np.diff(np.concatenate([heads, [idx.size]]))
        needed, first = np.unique(groups, return_index=True)
        tables = {
            g: self.row_group(g, int(idx[i])) for g, i in zip(needed.tolist(), first.tolist())
        }
        slices = [
            tables[g].slice(r, count)
            for g, r, count in zip(groups[heads].tolist(), rows[heads].tolist(), lengths.tolist())
        ]
        taken = slices[0] if len(slices) == 1 else pa.concat_tables(slices)
        return self._rows(taken, int(idx[0]))

    def row_group(self, g: int, row: int | None = None) -> Any:
        """Row group `g` as an Arrow table of the selected columns, decoded or from memory;
        errors name `row` (default: the group's first row)."""
        return self._decoded.get((self.path, g), lambda: self._decode(g, row))

    def _decode(self, g: int, row: int | None) -> Any:
        first, end = int(self.row_group_starts[g]), int(self.row_group_starts[g + 1])
        row = first if row is None else row
        where = f"{self.path} row {row} (row group {g}, rows {first}-{end - 1})"
        try:
            if self.remote is None:
                with os.fdopen(open_regular(self.path, pinned=self.pinned), "rb") as f:
                    return self._read_group(path_of_descriptor(f.fileno(), self.path), g)
            if not self.remote.cached:
                return self._read_group(RangedFile(self.remote), g)
            try:
                with self._cached_copy() as local:
                    return self._read_group(local, g)
            except (pa.ArrowException, OSError, CorruptDataError):
                if not self.remote.cache.recheck(self.remote.obj):
                    raise  # the cached copy matches the object: the object is damaged
                with self._cached_copy() as local:  # fetched again
                    return self._read_group(local, g)
        except TpufeedError:
            raise
        except FileNotFoundError as error:
            raise SourceNotFoundError(
                f"{where}: the file is gone: {error}", path=self.path, record=row
            ) from error
        except Exception as error:
            raise CorruptDataError(
                f"{where} cannot be decoded: {type(error).__name__}: {error}",
                path=self.path,
                record=row,
            ) from error

    def _read_group(self, source: Any, g: int) -> Any:
        reader = pq.ParquetFile(
            source, metadata=self.metadata, pre_buffer=True, page_checksum_verification=True
        )
        try:
            table = reader.read_row_group(g, columns=self.columns, use_threads=False)
        finally:
            reader.close()
        counts.count("bytes_read", self._stored_bytes(g))
        return table

    def _stored_bytes(self, g: int) -> int:
        """Bytes row group `g`'s selected columns take in the file (compressed): what a read
        of the group reads."""
        group, wanted = self.metadata.row_group(g), set(self.columns)
        chunks = (group.column(c) for c in range(group.num_columns))
        return sum(
            chunk.total_compressed_size
            for chunk in chunks
            if chunk.path_in_schema.split(".")[0] in wanted
        )

    def _rows(self, table: Any, row: int) -> list[dict[str, Any]]:
        try:
            return rows_of(table, self.columns)
        except Exception as error:
            raise SourceError(
                f"{self.path} row {row}: cannot convert the rows read: "
                f"{type(error).__name__}: {error}",
                path=self.path,
                record=row,
            ) from error

    def release_if_evicted(self) -> None:
        """Nothing to release: no handle on the cached copy outlives a row-group read."""

    def close(self) -> None:
        self._decoded.clear()

    def __repr__(self) -> str:
        return f"ParquetFile({self.path!r}, {len(self)} rows in {self.num_row_groups} row groups)"


class RangedFile(io.RawIOBase):
    """A read-only file over a gs:// object, each `read` one ranged GET: what pyarrow reads a
    footer or a row group through, without fetching the whole object."""

    def __init__(self, remote: RemoteFile):
        super().__init__()
        self._remote = remote
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._remote.size}
        self._position = max(0, base[whence] + offset)
        return self._position

    def read(self, size: int | None = -1) -> bytes:
        total = self._remote.size
        end = total if size is None or size < 0 else min(total, self._position + size)
        if end <= self._position:
            return b""
        data = self._remote.read_ranges([(self._position, end)])[0]
        self._position += len(data)
        return data


def _same_schema(first: ParquetFile, other: ParquetFile) -> None:
    """Raises naming `other` if its selected columns differ from `first`'s in name or type."""
    mine = {name: first.schema.field(name).type for name in first.columns}
    theirs = {name: other.schema.field(name).type for name in other.columns}
    if set(mine) != set(theirs):
        extra, lacking = sorted(set(theirs) - set(mine)), sorted(set(mine) - set(theirs))
        raise SourceError(
            f"{other.path}: its schema differs from {first.path}'s: columns "
            f"{extra} only here, {lacking} only there; pick common ones with "
            "columns=[...]",
            path=other.path,
        )
    for name, kind in mine.items():
        if theirs[name] != kind:
            raise SourceError(
                f"{other.path}: column {name!r} is {theirs[name]} here but {kind} "
                f"in {first.path}; files of one dataset need one schema",
                path=other.path,
            )
    other.columns = list(first.columns)  # one key order for every element


class ParquetSource(ShardedSource[ParquetFile]):
    """The rows of the Parquet files named by `paths` (paths or globs, local or gs://), as one
    sequence of dicts of the `columns` asked for (default all); every file must have them, of
    the same types."""

    def _count_read(self, records: list[Any]) -> None:
        """Rows are dicts: a file's bytes are counted as its row groups are decoded."""

    def __init__(
        self,
        paths: PathsLike,
        columns: Sequence[str] | None = None,
        cache: ShardCache | None = None,
        decoded_bytes: int = DEFAULT_DECODED_BYTES,
    ):
        if (
            not isinstance(decoded_bytes, int)
            or isinstance(decoded_bytes, bool)
            or decoded_bytes < 0
        ):
            raise InvalidArgumentError(f"decoded_bytes must be an int >= 0, got {decoded_bytes!r}")
        wanted = check_columns(columns)
        items = resolve_paths(paths, cache.retry if cache else None)
        if any(isinstance(item, RemoteObject) for item in items):
            cache = cache or ShardCache()
        decoded = DecodedRowGroups(decoded_bytes)

        def make(item: str | RemoteObject) -> ParquetFile:
            if isinstance(item, RemoteObject):
                if cache is None:  # set above whenever a path is on gs://
                    raise TpufeedError(f"{item.url}: a gs:// file needs a shard cache")
                return ParquetFile(item.url, wanted, RemoteFile(item, cache), decoded)
            return ParquetFile(item, wanted, decoded=decoded)

        if cache is None or len(items) == 1:
            files = [make(item) for item in items]
        else:  # footers of gs:// files are ranged GETs: fetch several at once
            files = map_in_threads(make, items, _OPEN_THREADS)
        for other in files[1:]:
            _same_schema(files[0], other)
        self.columns = list(files[0].columns)
        self.decoded = decoded
        super().__init__(files)

    def __repr__(self) -> str:
        return f"ParquetSource({len(self.files)} files, {len(self)} rows, columns={self.columns})"


def iter_parquet_rows(
    path: str | os.PathLike, columns: Sequence[str] | None = None
) -> Iterator[dict[str, Any]]:
    """Every row of one Parquet file (local or gs://, read by ranges), in order, as the dicts
    `ParquetSource` gives; one row group in memory at a time. Errors name the file and row.

    >>> for row in iter_parquet_rows("data/part-0.parquet", columns=["text"]):  # doctest: +SKIP
    ...     print(row["text"])
    """
    remote = (
        RemoteFile.open(os.fspath(path), ShardCache(max_bytes=0))
        if is_remote_url(os.fspath(path))
        else None
    )
    parquet = ParquetFile(path, columns, remote, DecodedRowGroups(0))
    for g in range(parquet.num_row_groups):
        table = parquet._decode(g, None)
        first = int(parquet.row_group_starts[g])
        for start in range(0, table.num_rows, _ROWS_PER_PIECE):
            yield from parquet._rows(table.slice(start, _ROWS_PER_PIECE), first + start)
