"""TFRecord files read by record index: one scan frames the records into a cached offset index.

A record is `uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)`,
all little-endian. The index (data offset and length of every record) is cached next to the file
as `<path>.tpufeed-index`, or under `index_dir` when that is given or the file's directory is not
writable. It is a derived file (`tpufeed.sources.tfrecord.index`): made for one file, by its
device, inode, size and mtime, checked by its CRC32C on first use, and made again otherwise.

Damage is reported when the damaged record is read, so `ignore_errors` can skip it: a record
whose data CRC fails is indexed like any other; where the framing itself breaks (a length whose
CRC fails, or a record cut off by the end of the file) nothing further can be split into
records, and the rest of the file is one last position that fails when read.

>>> write_tfrecords("/tmp/a.tfrecord", [b"x", b"yz"])  # doctest: +SKIP
2
>>> TFRecordSource("/tmp/*.tfrecord").__getitems__([1, 0])  # doctest: +SKIP
[b'yz', b'x']

A `gs://` file is indexed once (the index is cached under `<cache dir>/tfrecord-index`, keyed
by the object's URL and generation or ETag) and then read from its copy in the shard cache or, with a cache of
0 bytes, as coalesced ranged GETs of just the records asked for.
"""

from __future__ import annotations

import os
import threading
import warnings
from typing import BinaryIO

import numpy as np

from tpufeed.errors import RecordIndexError, TpufeedError
from tpufeed.sources._after_fork import forget_in_children
from tpufeed.sources.sharded import ShardedSource
from tpufeed.sources.tfrecord.framing import (
    _CRC,
    _HEADER,
    UNFRAMED,
    _corrupt,
    _masked_crc,
    _scan,
    scan_records,
    unframed,
    write_tfrecords,
)
from tpufeed.sources.tfrecord.index import (
    INDEX_SUFFIX,
    default_index_dir,
    index_name,
    index_stamp,
    load_index,
    save_index,
)
from tpufeed.storage.backends import is_remote_url
from tpufeed.storage.cache.holds import CopyHold
from tpufeed.storage.cache.shard_cache import ShardCache
from tpufeed.storage.cache.transfers import coalesce
from tpufeed.storage.local import PathsLike, resolve_paths
from tpufeed.storage.objects import RemoteObject
from tpufeed.storage.opener import FileIdentity, open_regular
from tpufeed.storage.remote import RemoteFile
from tpufeed.storage.threads import map_in_threads

__all__ = ["TFRecordFile", "TFRecordSource", "default_index_dir", "write_tfrecords"]

# Uncached gs:// reads: records closer than this are fetched in one GET (a GET's latency costs
# more than this many bytes), and no GET spans more than _MAX_SPAN.
_MAX_GAP = 256 << 10
_MAX_SPAN = 16 << 20
_INDEX_THREADS = 8


class TFRecordFile:
    """One TFRecord file read by local record index, each record's CRC checked on read.

    Picklable: the file handle is dropped and reopened on first read, the index travels along.
    A gs:// `path` is read through `remote` (default: the default shard cache). A local file is
    the one `pinned` names (default: the one indexed): a reopen that finds another file under the
    path, or a changed one, raises `CorruptDataError`; with `root`, a file whose real path
    leaves that folder is refused.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        index_dir: str | os.PathLike | None = None,
        remote: RemoteFile | None = None,
        pinned: FileIdentity | None = None,
        root: str | None = None,
    ):
        self.path = os.fspath(path)
        self.pinned = pinned if remote is None else None
        self.root = root  # the folder a local file must lie in (a built dataset's)
        self.index_dir = None if index_dir is None else os.fspath(index_dir)
        if remote is None and is_remote_url(self.path):
            remote = RemoteFile.open(self.path)
        self.remote = remote
        self._file: BinaryIO | None = None
        self._opened: CopyHold | None = None  # on the cached copy self._file is
        self._lock = threading.Lock()
        self._use = threading.Lock()
        forget_in_children(self)
        if remote is None:
            self.index_path, self._offsets, self._lengths = self._load_or_build_index()
        else:
            self.index_path, self._offsets, self._lengths = self._load_or_build_remote_index(remote)

    def _index_candidates(self, version: FileIdentity | str) -> list[str]:
        name = index_name(self.path, version)
        if self.index_dir is not None:
            return [os.path.join(self.index_dir, name)]
        return [self.path + INDEX_SUFFIX, os.path.join(default_index_dir(), name)]

    def _load_or_build_index(self) -> tuple[str | None, np.ndarray, np.ndarray]:
        with os.fdopen(
            open_regular(self.path, pinned=self.pinned, root=self.root), "rb", buffering=0
        ) as f:
            self.pinned = FileIdentity.of(os.fstat(f.fileno()))
            stamp = index_stamp(self.path, self.pinned)
            candidates = self._index_candidates(self.pinned)
            for index_path in candidates:
                found = load_index(index_path, stamp, self.pinned.size, self._index_what)
                if found is not None:
                    return index_path, *found
            offsets, lengths = scan_records(f.fileno(), self.path, self.pinned.size)
        return self._save_index(candidates, stamp, offsets, lengths)

    def _load_or_build_remote_index(
        self, remote: RemoteFile
    ) -> tuple[str | None, np.ndarray, np.ndarray]:
        """A gs:// or s3:// file's index is keyed by its URL and version (generation, ETag)."""
        obj = remote.obj
        directory = self.index_dir or os.path.join(remote.cache.root, "tfrecord-index")
        candidates = [os.path.join(directory, index_name(obj.url, obj.version))]
        stamp = index_stamp(obj.url, obj.version)
        found = load_index(candidates[0], stamp, obj.size, self._index_what)
        if found is not None:
            return candidates[0], *found
        if remote.cached:
            with remote.pinned(), os.fdopen(remote.open_copy(), "rb", buffering=0) as f:
                offsets, lengths = scan_records(f.fileno(), self.path, obj.size)
        else:
            offsets, lengths = _scan(
                lambda n, offset: remote.read_ranges([(offset, min(offset + n, obj.size))])[0],
                self.path,
                obj.size,
            )
        return self._save_index(candidates, stamp, offsets, lengths)

    @property
    def _index_what(self) -> str:
        return f"the record index of {self.path}"

    def _save_index(
        self, candidates: list[str], stamp: bytes, offsets: np.ndarray, lengths: np.ndarray
    ) -> tuple[str | None, np.ndarray, np.ndarray]:
        errors = []
        for index_path in candidates:
            try:
                os.makedirs(os.path.dirname(index_path) or ".", exist_ok=True)
                save_index(index_path, stamp, offsets, lengths)
                return index_path, offsets, lengths
            except OSError as e:
                errors.append(f"{index_path}: {e}")
        warnings.warn(
            f"{self.path}: cannot cache its record index ({'; '.join(errors)}); "
            "it will be rebuilt on every open",
            stacklevel=4,
        )
        return None, offsets, lengths

    def __len__(self) -> int:
        return int(self._offsets.size)

    def _fd(self) -> int:
        with self._lock:
            if self._file is None:
                fd = open_regular(self.path, pinned=self.pinned, root=self.root)
                self._file = os.fdopen(fd, "rb", buffering=0)
            return self._file.fileno()

    def read(self, indices: np.ndarray) -> list[bytes]:
        """Returns the records at local `indices`, in that order; reads go in file order."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            bad = int(idx[(idx < 0) | (idx >= n)][0])
            raise RecordIndexError(
                f"{self.path}: record index {bad} is out of range for a file of {n} records"
            )
        if self.remote is None:
            return self._read_fd(self._fd(), idx)
        if not self.remote.cached:
            return self._read_ranges(self.remote, idx)
        with self._use:
            if self._file is not None and self.remote.unchanged(self._opened):
                return self._read_fd(self._file.fileno(), idx)
            self.close()  # evicted, replaced or changed since it was opened
            with self.remote.pinned():
                with self._lock:
                    self._file = os.fdopen(self.remote.open_copy(), "rb", buffering=0)
                    self._opened = self.remote.hold(self.release_if_evicted)
                    fd = self._file.fileno()
                return self._read_fd(fd, idx)

    def _read_fd(self, fd: int, idx: np.ndarray) -> list[bytes]:
        records = idx.tolist()
        offsets = self._offsets[idx].tolist()
        lengths = self._lengths[idx].tolist()
        out: list = [None] * idx.size
        # Offsets grow with the record index, so sorting indices sorts reads by position.
        for i in np.argsort(idx, kind="stable").tolist():
            offset, length, record = offsets[i], lengths[i], records[i]
            if length == UNFRAMED:
                start = offset - _HEADER.size
                raise unframed(
                    self.path,
                    record,
                    os.pread(fd, _HEADER.size, start),
                    start,
                    os.fstat(fd).st_size,
                )
            buf = os.pread(fd, length + _CRC.size, offset)
            if len(buf) != length + _CRC.size:
                raise _corrupt(
                    self.path,
                    record,
                    offset - _HEADER.size,
                    "the file is shorter than when its index was built",
                )
            out[i] = self._checked(buf, length, record, offset)
        return out

    def _read_ranges(self, remote: RemoteFile, idx: np.ndarray) -> list[bytes]:
        """Just the records asked for, as parallel ranged GETs of nearby records coalesced."""
        wanted = np.unique(idx)
        if self._lengths[wanted[-1]] == UNFRAMED:
            start = int(self._offsets[wanted[-1]]) - _HEADER.size
            size = remote.size
            header = remote.read_ranges([(start, min(start + _HEADER.size, size))])[0]
            raise unframed(self.path, int(wanted[-1]), header, start, size)
        starts = self._offsets[wanted].astype(np.int64)
        ends = starts + self._lengths[wanted].astype(np.int64) + _CRC.size
        spans = coalesce(list(zip(starts.tolist(), ends.tolist())), _MAX_GAP, _MAX_SPAN)
        blobs = remote.read_ranges(spans)
        span_starts = np.array([s for s, _ in spans], dtype=np.int64)
        which = np.searchsorted(span_starts, starts, side="right") - 1
        found = {}
        for record, start, end, w in zip(
            wanted.tolist(), starts.tolist(), ends.tolist(), which.tolist()
        ):
            rel = start - spans[w][0]
            length = end - start - _CRC.size
            found[record] = self._checked(
                blobs[w][rel : rel + length + _CRC.size], length, record, start
            )
        return [found[i] for i in idx.tolist()]

    def _checked(self, buf: bytes, length: int, record: int, offset: int) -> bytes:
        data = buf[:length]
        if _masked_crc(data) != _CRC.unpack_from(buf, length)[0]:
            raise _corrupt(
                self.path,
                record,
                offset - _HEADER.size,
                "data CRC mismatch (the record is damaged, or the file changed "
                "after its index was built)",
            )
        return data

    def release_if_evicted(self) -> None:
        """Closes the handle if its cached copy is gone (its disk space is freed only then)."""
        if self.remote is None or self._file is None or not self._use.acquire(blocking=False):
            return
        try:
            if self._file is not None and not self.remote.unchanged(self._opened, mark=False):
                self.close()
        finally:
            self._use.release()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
            if self._opened is not None:
                self._opened.close()  # an evicted copy's disk is free now

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_file"] = None
        state["_opened"] = None
        del state["_lock"]
        del state["_use"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._use = threading.Lock()
        forget_in_children(self)

    def _after_fork_in_child(self) -> object:
        """In a forked child: the parent's handle is closed (only this process's copy of the
        descriptor) and reopened on the next read; the hold on a cached copy is left alone; the
        locks are new, as a thread the child does not have may have held them."""
        inherited, held = self._file, self._opened
        self._file, self._opened = None, None
        self._lock = threading.Lock()
        self._use = threading.Lock()
        if inherited is not None:
            inherited.close()
        return held

    def __repr__(self) -> str:
        return f"TFRecordFile({self.path!r}, {len(self)} records)"


class TFRecordSource(ShardedSource[TFRecordFile]):
    """The records of the TFRecord files named by `paths` (paths or globs), as one sequence.

    gs:// files go through `cache` (default: `ShardCache()`); `ShardCache(max_bytes=0)` reads
    them as ranged GETs of the records needed instead of whole-file copies.
    """

    def __init__(
        self,
        paths: PathsLike,
        index_dir: str | os.PathLike | None = None,
        cache: ShardCache | None = None,
    ):
        # A glob like "data/*" also matches the indexes cached next to the files: skip them.
        # Files hold no handle until their first read, so a failure here leaks nothing.
        items = [
            p
            for p in resolve_paths(paths, cache.retry if cache else None)
            if INDEX_SUFFIX not in os.path.basename(p.name if isinstance(p, RemoteObject) else p)
        ]
        if any(isinstance(p, RemoteObject) for p in items):
            cache = cache or ShardCache()

        def make(item: str | RemoteObject) -> TFRecordFile:
            if isinstance(item, RemoteObject):
                if cache is None:  # set above whenever a path is on gs://
                    raise TpufeedError(f"{item.url}: a gs:// file needs a shard cache")
                return TFRecordFile(item.url, index_dir, RemoteFile(item, cache))
            return TFRecordFile(item, index_dir)

        if cache is None or len(items) == 1:
            files = [make(item) for item in items]
        else:  # indexing a gs:// file the first time reads it whole: do several at once
            files = map_in_threads(make, items, _INDEX_THREADS)
        super().__init__(files)
