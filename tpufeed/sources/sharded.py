"""Several record files addressed as one source: a global index runs through files in order.

Files on gs:// (those with a `remote` attribute) are counted in parallel, and the source's
`will_read` hint drives a read-ahead that fetches them into the shard cache in plan order.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import numpy as np

from tpufeed.errors import InvalidArgumentError, RecordIndexError
from tpufeed.observe import counts
from tpufeed.order.state import ShardStamp
from tpufeed.sources._after_fork import forget_in_children
from tpufeed.storage.cache.readahead import ReadAhead
from tpufeed.storage.opener import FileIdentity, check_regular
from tpufeed.storage.remote import RemoteFile
from tpufeed.storage.threads import map_in_threads


class RecordFile(Protocol):
    """One file of records, read by local index. Picklable: handles reopen lazily."""

    path: str
    remote: RemoteFile | None  # a gs:// file's object and shard cache; None for a local file

    def __len__(self) -> int: ...

    def read(self, indices: np.ndarray) -> list[bytes]:
        """Returns the records at `indices` (local, int64, any order), in that order."""
        ...

    def release_if_evicted(self) -> None:
        """Closes what holds a gs:// file's cached copy once the cache has evicted it."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class LeasedRecordFile(RecordFile, Protocol):
    """A gs:// file whose cached copy can be read one record at a time, held while it is read."""

    def leased_record_reader(self) -> AbstractContextManager[Callable[[int], bytes] | None]:
        """Reads one record by local index; None if the file is not of one record per chunk."""
        ...


F = TypeVar("F", bound=RecordFile)


_SWEEP_EVERY_S = 1.0
_COUNT_THREADS = 16


def count_records(files: Sequence[RecordFile], parallel: bool) -> list[int]:
    """`len` of every file; in threads when counting means network round trips."""
    return map_in_threads(len, files, _COUNT_THREADS if parallel else 1)


class ShardedSource(Generic[F]):
    """Records of `files` as one sequence: `len` is the sum, index i falls in file order."""

    def __init__(self, files: Sequence[F]):
        if not files:
            raise InvalidArgumentError("a sharded source needs at least one file")
        self.files = list(files)
        self._remote = [f.remote for f in self.files]
        self._remote_ids = [i for i, r in enumerate(self._remote) if r is not None]
        # Read-ahead fills the shard cache: files read by ranges (no cache) take no part.
        self._cached = [r if r is not None and r.cached else None for r in self._remote]
        counts = np.array(
            count_records(self.files, parallel=bool(self._remote_ids)), dtype=np.int64
        )
        self._starts = np.concatenate([np.zeros(1, np.int64), np.cumsum(counts)])
        self._readahead: Any = None
        self._last_sweep = time.monotonic()
        self._record_readers: list[Any] | None = None  # per-file one-record readers, if all have
        self._by_ranges = False  # they are `range_reader`s: read(i, i + 1)[0] reads record i
        # gs:// files read their cached copies one record at a time, held for each batch.
        leased: list[LeasedRecordFile] = [f for f in self.files if isinstance(f, LeasedRecordFile)]
        self._leased_files = leased if len(leased) == len(self.files) else []
        self._leased = (
            bool(self._remote_ids)
            and bool(self._leased_files)
            and all(r is not None and r.cached for r in self._remote)
        )
        forget_in_children(self)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_readahead"] = None  # threads stay with the process that announced the plan
        state["_record_readers"] = None  # open readers stay with their process
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        forget_in_children(self)

    def _after_fork_in_child(self) -> Any:
        """In a forked child: the parent's read-ahead (its threads are not in the child) and
        one-record readers are left alone (see `_after_fork`)."""
        inherited = (self._readahead, self._record_readers)
        self._readahead = None
        self._record_readers = None
        return inherited

    def will_read(self, indices: np.ndarray) -> None:
        """The records the plan reads next, in order: gs:// shards among them are fetched ahead."""
        if not any(self._cached):
            return
        if self._readahead is None:
            self._readahead = ReadAhead(self._cached, sweep=self.release_evicted)
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        self._readahead.announce(np.searchsorted(self._starts, idx, side="right") - 1)

    def release_evicted(self) -> None:
        """Closes readers whose cached copy was evicted, so its disk space is freed."""
        self._last_sweep = time.monotonic()
        for i in self._remote_ids:
            self.files[i].release_if_evicted()

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def shard_starts(self) -> tuple[int, ...]:
        """Global index of each file's first record, then the total: what windowed shuffles use."""
        return tuple(int(s) for s in self._starts)

    def __getitem__(self, index: int) -> bytes:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[bytes]:
        """Batched read: one `read` call per file touched, results in the order asked."""
        n = len(self)
        idx = checked_indices(
            indices,
            n,
            lambda bad: f"record index {bad} is out of range for a source of {n} records",
        )
        if not idx.size:
            return []
        records = self._read(idx)
        self._count_read(records)
        return records

    def _count_read(self, records: list[Any]) -> None:
        """Counts the bytes of records read (`bytes_read`): once per batched read."""
        counts.count("bytes_read", sum(map(len, records)))

    def _read(self, idx: np.ndarray) -> list[Any]:
        """The records at global `idx` (checked), in that order."""
        file_ids = np.searchsorted(self._starts, idx, side="right") - 1
        if self._remote_ids and time.monotonic() - self._last_sweep > _SWEEP_EVERY_S:
            self.release_evicted()
        readers = self._one_record_readers()
        if readers:
            local = (idx - self._starts[file_ids]).tolist()
            try:  # one call per record in the order asked, like a plain loop over the readers
                if self._by_ranges:  # array_record's read(start, end): no Python call a record
                    records = [readers[f](i, i + 1)[0] for f, i in zip(file_ids.tolist(), local)]
                else:
                    records = [readers[f](i) for f, i in zip(file_ids.tolist(), local)]
                # An empty record may be one cut off by a file truncated since it was opened:
                # the per-file path below tells the two apart.
                if b"" not in records:
                    return records
            except Exception:  # noqa: BLE001 - the per-file path below names the bad record
                self._record_readers = None  # a failed reader is reopened there
        elif self._leased:
            leased = self._read_leased(idx, file_ids)
            if leased is not None and b"" not in leased:  # as above
                return leased
        if (file_ids == file_ids[0]).all():
            f = int(file_ids[0])
            return self.files[f].read(idx - self._starts[f])
        # Group by file with one sort; scatter each file's records back in one numpy assignment.
        order = np.argsort(file_ids, kind="stable")
        groups = np.split(order, np.flatnonzero(np.diff(file_ids[order])) + 1)
        out = np.empty(idx.size, dtype=object)
        for where in groups:
            f = int(file_ids[where[0]])
            out[where] = self.files[f].read(idx[where] - self._starts[f])
        return out.tolist()

    def locate(self, index: int) -> tuple[str, int]:
        """Returns (path, index within that file) of global record `index`."""
        if not 0 <= index < len(self):
            raise RecordIndexError(
                f"record index {index} is out of range for a source of {len(self)} records"
            )
        f = int(np.searchsorted(self._starts, index, side="right") - 1)
        return self.files[f].path, int(index - self._starts[f])

    def describe(self, index: int) -> str:
        path, local = self.locate(index)
        return f"{path} record {local} (global record {index})"

    def shard_stamps(self) -> list[ShardStamp]:
        """Each file's name, size and version, as a state remembers them (`file_stamp`)."""
        return [file_stamp(f) for f in self.files]

    def file_versions(self) -> list[str]:
        """Each file's path and whole identity (`file_version`): what a file derived from the
        source, such as a record cache entry, is keyed by."""
        return [file_version(f) for f in self.files]

    def fingerprint(self) -> str:
        shards = ",".join(f"{os.path.basename(f.path)}:{len(f)}" for f in self.files)
        return f"{type(self).__name__}[{shards}]"

    def _read_leased(self, idx: np.ndarray, file_ids: np.ndarray) -> list[bytes] | None:
        """The fast path for cached gs:// files: one-record reads of their local copies, a file
        at a time, each held in place while it is read (so a batch across more shards than the
        cache holds needs room for one). None if a file has no such reader or a read fails (the
        per-file path then names the bad record, or re-checks the cached copy)."""
        local = (idx - self._starts[file_ids]).tolist()
        order = np.argsort(file_ids, kind="stable")
        out: list[Any] = [None] * idx.size
        for where in np.split(order, np.flatnonzero(np.diff(file_ids[order])) + 1):
            with self._leased_files[int(file_ids[where[0]])].leased_record_reader() as read:
                if read is None:
                    self._leased = False  # this source's files are not of one record per chunk
                    return None
                try:
                    for j in where.tolist():
                        out[j] = read(local[j])
                except Exception:  # noqa: BLE001 - see the docstring
                    return None
        return out

    def _one_record_readers(self) -> list[Any]:
        """Where some files have a `direct_reader()` (a record map), those and every other
        file's `record_reader()`; else every file's `range_reader()` (`_by_ranges`), else every
        file's `record_reader()`; or [] unless all files have one (local files)."""
        if self._record_readers is None:
            readers = []
            if not self._remote_ids:
                # Files with a record map read a record with one pread; the others, if any,
                # through their own one-record readers.
                direct = [getattr(f, "direct_reader", lambda: None)() for f in self.files]
                if any(direct):
                    readers = [
                        d if d is not None else getattr(f, "record_reader", lambda: None)()
                        for d, f in zip(direct, self.files)
                    ]
                    if all(readers):
                        self._by_ranges = False
                        self._record_readers = readers
                        return readers
                readers = [getattr(f, "range_reader", lambda: None)() for f in self.files]
                self._by_ranges = bool(readers) and all(readers)
                if not self._by_ranges:
                    readers = [getattr(f, "record_reader", lambda: None)() for f in self.files]
            self._record_readers = readers if readers and all(readers) else []
        return self._record_readers

    def close(self) -> None:
        self._record_readers = None
        if self._readahead is not None:
            self._readahead.close()
            self._readahead = None
        for f in self.files:
            f.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.files)} files, {len(self)} records)"


def file_stamp(f: RecordFile) -> ShardStamp:
    """What a state remembers of file `f`: the manifest's size and CRC32C for a shard of a
    built dataset; a remote object's size and `content_version` (CRC32C, else generation or
    last-modified time, else ETag); a local file's size and modification time, as pinned when
    first opened."""
    crc32c = getattr(f, "crc32c", None)
    if isinstance(crc32c, str):  # a manifest's entry: the same on every copy of the dataset
        return ShardStamp(f.path, int(getattr(f, "num_bytes", 0)), int(crc32c, 16), 0)
    if f.remote is not None:
        obj = f.remote.obj
        return ShardStamp(f.path, obj.size, obj.content_version, obj.generation * 1000)  # us->ns
    pinned = getattr(f, "pinned", None)
    if pinned is None:
        pinned = FileIdentity.of(check_regular(f.path))
    return ShardStamp(f.path, pinned.size, pinned.mtime_ns, pinned.mtime_ns)


def file_version(f: RecordFile) -> str:
    """File `f` and its whole identity: a remote object's version (GCS generation, S3 ETag); a
    local file's device, inode, size and modification time as pinned when first opened, so a
    file replaced by another of the same size and time is another file (`derived_name`)."""
    if f.remote is not None:
        return f.remote.obj.identity
    pinned = getattr(f, "pinned", None)
    if pinned is None:
        pinned = FileIdentity.of(check_regular(f.path))
    return f"{os.path.abspath(f.path)}:{pinned.key()}"


def checked_indices(
    indices: Sequence[int] | np.ndarray, n: int, message: Callable[[int], str]
) -> np.ndarray:
    """`indices` as a flat int64 array, each in [0, n); RecordIndexError(message(first bad))."""
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise RecordIndexError(message(int(idx[(idx < 0) | (idx >= n)][0])))
    return idx
