"""One ArrayRecord file, read by local record index: checked at open, picklable, local or gs://.

A file's structure is checked before array_record's reader is trusted with it
(`tpufeed.sources.array_record.structure`), so a damaged file raises and never reads as empty.
A `gs://` file is read from its copy in the shard cache (`tpufeed.storage.cache.shard_cache`), fetched when
first needed or ahead of time; its record count comes from its footer alone, fetched by byte
ranges (`tpufeed.sources.array_record.count`) and remembered in the cache.

A local file is pinned when first opened (`tpufeed.storage.local.FileIdentity`): every later
open (after pickling, in a worker, in the reader process, after a failed read) must find that
file, unchanged, under the path, or raises `CorruptDataError`. The reader opens the descriptor
that was checked (`/proc/self/fd/N` on Linux), so no swap between check and open gets through.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from array_record.python.array_record_module import ArrayRecordReader

from tpufeed.errors import (
    CorruptDataError,
    RecordIndexError,
    SourceError,
    SourceNotFoundError,
    TpufeedError,
)
from tpufeed.sources._after_fork import forget_in_children
from tpufeed.sources.array_record._reader_process import ReaderProcess, native_state_inherited
from tpufeed.sources.array_record.count import count_by_ranges
from tpufeed.sources.array_record.direct import MappedFile, open_mapped
from tpufeed.sources.array_record.structure import (
    READER_OPTIONS,
    RIEGELI_SIGNATURE,
    changed_in_place,
    close_reporting,
    group_size,
    structure_problem,
)
from tpufeed.storage.backends import is_remote_url
from tpufeed.storage.cache.holds import CopyHold
from tpufeed.storage.opener import FileIdentity, open_regular, path_of_descriptor
from tpufeed.storage.remote import RemoteFile

__all__ = ["ArrayRecordFile"]

# array_record's batched `read(list)` costs O(records in the file) per call (it allocates a
# vector per chunk: ~50 us for 25,000 records, ~400 us for 200,000) and hands each chunk to its
# thread pool. For files of one record per chunk and small records, one `read(i, i + 1)` per
# index is faster. Measured on 2 CPUs, 8 files of 25,000 records, batches of 256 random indices:
# 1 KiB records ~200k vs ~65k records/s, 10 KiB 134k vs 102k; but for 100 KiB records the pool's
# parallel decoding wins (7k vs 11k when compressible), hence the size limit.
_PER_RECORD_READ_MAX_BYTES = 32 * 1024


class ArrayRecordFile:
    """One ArrayRecord file, read by local record index; a damaged file raises, never reads empty.

    `len()` opens the file, checks it and closes it again, so a parent process that only counts
    records holds no descriptors or in-memory indices; `read` keeps its reader open. Pickling
    drops the reader, and the copy reopens (and re-checks) the file on its first read.

    A gs:// `path` is read through `remote` (default: the default shard cache): each read holds
    the cached copy in place, and a reader whose copy was evicted or replaced is reopened.
    A local file is the one `pinned` names (default: the one found on first open); a path that
    names another file later, or a changed one, raises `CorruptDataError` when reopened. With
    `root`, a file whose real path leaves that folder is refused.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        remote: RemoteFile | None = None,
        pinned: FileIdentity | None = None,
        root: str | None = None,
    ):
        self.path = os.fspath(path)
        if remote is None and is_remote_url(self.path):
            remote = RemoteFile.open(self.path)
        self.remote = remote
        self.pinned = pinned if remote is None else None  # cached copies are checked by the cache
        self.root = root  # the folder a local file must lie in (a built dataset's)
        self._num_records: int | None = None
        self._start_in_process()

    def _start_in_process(self) -> None:
        """Nothing of the file open yet in this process (a new object, or an unpickled one)."""
        self._reader: ArrayRecordReader | None = None
        self._opened: CopyHold | None = None  # on the cached copy the reader has open
        self._per_record_reads = False
        self._identity: tuple[str, tuple[int, ...]] | None = None  # of the file the reader opened
        self._lock = threading.Lock()
        self._use = threading.Lock()  # a read of a cached copy, which eviction checks wait for
        self._mapped: MappedFile | None = None  # the record map, for direct reads
        self._map_tried = False  # whether this process looked for the map
        forget_in_children(self)

    def __len__(self) -> int:
        if self._num_records is None:
            with self._lock:
                if self._num_records is None:
                    if native_state_inherited():
                        self._num_records = ReaderProcess.shared().call("count", self)
                    elif self.remote is not None:
                        self._num_records = self._count_remote()
                    else:
                        self._open_checked().close()
        return self._known_count()

    def read(self, indices: np.ndarray) -> list[bytes]:
        """Returns the records at local `indices` (any order, repeats allowed), in that order."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if native_state_inherited():
            return ReaderProcess.shared().call("read", self, idx)
        if self.remote is not None:
            return self._read_cached(idx)
        reader = self._reader if self._reader is not None else self._open_for_reading()
        return self._read_with(reader, idx)

    def _read_cached(self, idx: np.ndarray) -> list[bytes]:
        """Reads from the cached copy, held in place; a copy that fails is re-checked once."""
        remote = self._remote()
        rechecked = False
        while True:
            try:
                with self._use:
                    if self._reader is not None and remote.unchanged(self._opened):
                        return self._read_with(self._reader, idx)
                    self.close()  # evicted, replaced or changed since the reader opened it
                    with remote.pinned():
                        reader = self._open_for_reading()
                        self._opened = remote.hold(self.release_if_evicted)
                        return self._read_with(reader, idx)
            except CorruptDataError:
                self.close()
                if rechecked or not remote.cache.recheck(remote.obj):
                    raise  # the cached copy matches the object: the object itself is damaged
                rechecked = True

    def release_if_evicted(self) -> None:
        """Closes the reader if its cached copy is gone (its disk space is freed only then)."""
        if self.remote is None or self._reader is None or not self._use.acquire(blocking=False):
            return
        try:
            if self._reader is not None and not self.remote.unchanged(self._opened, mark=False):
                self.close()
        finally:
            self._use.release()

    def _count_remote(self) -> int:
        """The record count of a gs:// file: remembered, or read from its footer by ranges."""
        remote = self._remote()
        count = remote.cache.recall(remote.obj, "num_records")
        if isinstance(count, int) and not isinstance(count, bool):
            return count
        if remote.cache.contains(remote.obj):
            with remote.pinned():
                self._open_checked().close()
            count = self._known_count()
        else:
            count = count_by_ranges(remote)
            if count is None:  # not the layout count_by_ranges knows: count a whole copy
                probe = ArrayRecordFile(remote.obj.url, remote)
                with remote.pinned():
                    probe._open_checked().close()
                count = probe._known_count()
        remote.cache.remember(remote.obj, "num_records", count)
        return count

    def _read_with(self, reader: ArrayRecordReader, idx: np.ndarray) -> list[bytes]:
        n = self._num_records
        keys = idx.tolist()
        if keys and (min(keys) < 0 or max(keys) >= n):
            bad = next(k for k in keys if not 0 <= k < n)
            raise RecordIndexError(
                f"record index {bad} is out of range for {self.path}, which has {n} records"
            )
        try:
            if self._per_record_reads:
                records = [reader.read(key, key + 1)[0] for key in keys]
            else:
                records = reader.read(keys)
        except Exception as batch_error:  # array_record raises RuntimeError, or others via pybind
            changed = self._changed_since_open(keys[0])
            raise (changed or self._find_bad_record(keys, batch_error)) from batch_error
        if b"" in records:  # array_record reads a record cut off by truncation as b"", silently
            changed = self._changed_since_open(keys[records.index(b"")])
            if changed is not None:
                raise changed
        return records

    def _changed_since_open(self, record: int) -> CorruptDataError | None:
        """The error to raise if the file the reader has open was truncated or rewritten in
        place since it was opened (`changed_in_place`)."""
        return (
            None if self._identity is None else changed_in_place(self.path, *self._identity, record)
        )

    def record_reader(self) -> Callable[[int], bytes] | None:
        """A function reading one record by local index, unchecked, for local files of one
        record per chunk (the fastest access path); None otherwise. The caller re-reads a
        failure through `read`, which names the bad record."""
        read = self.range_reader()
        return None if read is None else lambda i: read(i, i + 1)[0]

    def range_reader(self) -> Callable[[int, int], list[bytes]] | None:
        """array_record's own `read(start, end)` of the open reader, where `record_reader`
        has one: a caller reading `read(i, i + 1)[0]` in its own loop makes no Python call
        a record (W1: 0.45k instructions a record). Unchecked, like `record_reader`."""
        if self.remote is not None or native_state_inherited():
            return None
        reader = self._reader if self._reader is not None else self._open_for_reading()
        return reader.read if self._per_record_reads else None

    def direct_reader(self) -> Callable[[int], bytes] | None:
        """A function reading one record by local index through the file's record map
        (`tpufeed.sources.array_record.direct`), checked by CRC32C; None where the file is not
        local or has no map of its own. It raises where a span does not match (see there)."""
        read_range = self.range_reader()
        if read_range is None or self.pinned is None:
            return None
        with self._lock:
            if not self._map_tried:
                self._map_tried = True
                self._mapped = open_mapped(self.path, self._known_count(), self.pinned, self.root)
        mapped = self._mapped
        return None if mapped is None or mapped.dropped else mapped.reader(read_range)

    @contextlib.contextmanager
    def leased_record_reader(self) -> Iterator[Callable[[int], bytes] | None]:
        """`record_reader` for a gs:// file: reads its cached copy, held in place (not closed
        for eviction) until the block ends. None if the file is not of one record per chunk."""
        if native_state_inherited():
            yield None
            return
        remote = self._remote()
        with self._use:
            reader = self._reader
            if reader is None or not remote.unchanged(self._opened):
                self.close()  # evicted, replaced or changed since the reader opened it
                with remote.pinned():
                    reader = self._open_for_reading()
                    self._opened = remote.hold(self.release_if_evicted)
            if not self._per_record_reads:
                yield None
                return
            read = reader.read
            yield lambda i: read(i, i + 1)[0]

    def close(self) -> None:
        helper = ReaderProcess.running()
        if helper is not None:
            helper.forget(self)
        with self._lock:
            mapped, self._mapped, self._map_tried = self._mapped, None, False
            if mapped is not None:
                mapped.close()
            try:
                if self._reader is not None:
                    reader, self._reader = self._reader, None
                    close_reporting(reader)  # a failure here was raised when the read failed
            finally:
                if self._opened is not None:
                    self._opened.close()  # an evicted copy's disk is free now

    def __getstate__(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "num_records": self._num_records,
            "remote": self.remote,
            "pinned": self.pinned,
            "root": self.root,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self._num_records = state["num_records"]
        self.remote = state.get("remote")
        self.pinned = state.get("pinned")
        self.root = state.get("root")
        self._start_in_process()

    def _after_fork_in_child(self) -> tuple:
        """In a forked child: the parent's reader, hold and map are left alone (see
        `_after_fork`)."""
        inherited = (self._reader, self._opened, self._mapped)
        self._reader, self._opened = None, None
        self._mapped, self._map_tried = None, False
        self._lock = threading.Lock()
        self._use = threading.Lock()
        return inherited

    def _remote(self) -> RemoteFile:
        """The cached copy of a gs:// file (the paths that call this read only those)."""
        if self.remote is None:
            raise TpufeedError(f"{self.path} is a local file: it has no cached copy")
        return self.remote

    def _known_count(self) -> int:
        """The record count, which opening the file (`_open_checked`) sets."""
        if self._num_records is None:
            raise TpufeedError(f"{self.path}: its record count is unknown until it is opened")
        return self._num_records

    def __repr__(self) -> str:
        count = "unopened" if self._num_records is None else f"{self._num_records} records"
        return f"ArrayRecordFile({self.path!r}, {count})"

    def _open_for_reading(self) -> ArrayRecordReader:
        with self._lock:
            if self._reader is None:
                self._reader = self._open_checked()
            return self._reader

    def _open_checked(self) -> ArrayRecordReader:
        """Opens a reader after checking the file's structure; sets or re-checks the count.

        For a gs:// file this opens the cached copy: callers hold it pinned.
        """
        local = self.path if self.remote is None else self.remote.local_path()
        try:
            fd = (
                open_regular(local, self.path, self.pinned, self.root)
                if self.remote is None
                else self.remote.open_copy()  # the copy the cache verified, or an error
            )
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                size = st.st_size
                head = f.read(len(RIEGELI_SIGNATURE))
                problem = structure_problem(size, head)
                if problem is not None:
                    raise CorruptDataError(f"{self.path}: {problem}", path=self.path)
                reader = self._reader_of(local, f.fileno())
        except FileNotFoundError:
            raise SourceNotFoundError(f"no such file: {self.path}", path=self.path) from None
        except OSError as e:
            raise SourceError(f"{self.path}: cannot open: {e}", path=self.path) from e
        num_records = reader.num_records()
        if not reader.ok():
            raise CorruptDataError(
                f"{self.path}: file is truncated or corrupted: array_record reports "
                f"{num_records} records as it cannot read the ArrayRecord footer or postscript "
                f"of this {size:,} bytes file ({close_reporting(reader)})",
                path=self.path,
            )
        if self._num_records is not None and num_records != self._num_records:
            close_reporting(reader)
            raise CorruptDataError(
                f"{self.path}: file changed since it was first opened: it now has {num_records} "
                f"records, it had {self._num_records}",
                path=self.path,
            )
        self._num_records = num_records
        self._identity = (local, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
        if self.remote is None and self.pinned is None:
            self.pinned = FileIdentity.of(st)
        self._per_record_reads = (
            group_size(reader.writer_options_string()) == 1
            and num_records < 2**31  # read(begin, end) takes int32
            and size < _PER_RECORD_READ_MAX_BYTES * max(num_records, 1)
        )
        return reader

    def _reader_of(self, local: str, fd: int) -> ArrayRecordReader:
        """array_record's reader of the file open as `fd` (checked: so not reopened by name,
        where Linux allows), `local` the path it was opened by."""
        try:
            return ArrayRecordReader(path_of_descriptor(fd, local), READER_OPTIONS)
        except Exception as e:
            raise CorruptDataError(
                f"{self.path}: array_record cannot open it: {e}", path=self.path
            ) from e

    def _find_bad_record(self, keys: list[int], batch_error: Exception) -> CorruptDataError:
        """Re-reads a failed batch one record at a time to name the record that fails."""
        reader = self._reader
        if reader is None or not reader.ok():
            self.close()  # a failed reader is replaced; reopening re-checks the file
            reader = self._open_for_reading()
        for key in dict.fromkeys(keys):
            try:
                reader.read([key])
            except Exception as e:  # noqa: BLE001 - array_record raises bare RuntimeErrors
                return CorruptDataError(
                    f"{self.path} record {key} cannot be read: {e}", path=self.path, record=key
                )
        shown = ", ".join(map(str, keys[:8])) + (", ..." if len(keys) > 8 else "")
        return CorruptDataError(
            f"{self.path}: a batched read of records [{shown}] ({len(keys)} records) failed, "
            f"though each record reads alone: {batch_error}",
            path=self.path,
        )
