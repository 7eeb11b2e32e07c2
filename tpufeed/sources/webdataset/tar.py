"""WebDataset tar shards read in place, one sample by index: `Dataset.from_webdataset(paths)`.

A shard's headers are walked once, within bounds (`headers`), into a sample index (`index`:
members grouped into samples exactly as WebDataset groups them), kept as a derived file keyed
by the tar's whole identity and checked by its CRC32C (`index_file`); a sample is then one
read of the span its members take, from the file pinned when it was opened. A sample
is a dict as `WebDataset(urls).decode()` gives it: `__key__`, `__url__` (the shard's path or
gs:// URL), and one field per member extension, decoded by extension
(`tpufeed.sources.webdataset.fields`; `decode=False`: every field as bytes).

>>> source = WebDatasetSource("shards/train-*.tar")  # doctest: +SKIP
>>> source[0]  # doctest: +SKIP
{'__key__': '000000', '__url__': 'shards/train-000.tar', 'jpg': b'...', 'cls': 3}

gs:// and s3:// shards go through the shard cache (indexed from the cached copy, the index kept
under `<cache dir>/tar-index` keyed by the object's generation or ETag) or, with a cache of 0
bytes, as ranged GETs: of the headers (1 MiB windows) to index, of the samples asked for
(nearby ones coalesced) to read.

Paths are read as WebDataset users write them (`urls`: `{000..099}` brace ranges, `::`
between patterns, `file:` URLs). A gzip-compressed shard (`.tgz`, `.tar.gz`; told by its bytes,
or by its name in a store) is decompressed once into a checked copy under the cache folder's
`wds/` (`copies`), and read from it in place.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from tpufeed.errors import CorruptDataError, InvalidArgumentError, TpufeedError
from tpufeed.observe import counts
from tpufeed.sources.descriptor import OwnDescriptor
from tpufeed.sources.sharded import ShardedSource, checked_indices
from tpufeed.sources.webdataset.copies import GZIP_MAGIC, GZIP_SUFFIXES, tar_copy
from tpufeed.sources.webdataset.fields import decoder_for, refused, require
from tpufeed.sources.webdataset.index import LOCAL_WINDOW, REMOTE_WINDOW, TarIndex, scan_tar
from tpufeed.sources.webdataset.index_file import (
    Place,
    load_index,
    local_places,
    remote_identity,
    remote_places,
    save_index,
)
from tpufeed.sources.webdataset.urls import shard_paths
from tpufeed.storage.backends import is_remote_url
from tpufeed.storage.cache.layout import default_cache_dir
from tpufeed.storage.cache.shard_cache import ShardCache
from tpufeed.storage.cache.transfers import coalesce
from tpufeed.storage.local import PathsLike, resolve_paths
from tpufeed.storage.objects import RemoteObject
from tpufeed.storage.opener import FileIdentity, open_pinned, open_regular
from tpufeed.storage.remote import RemoteFile
from tpufeed.storage.threads import map_in_threads

__all__ = ["TarShard", "WebDatasetSource"]

_MAX_GAP = 256 << 10  # uncached gs:// reads, as TFRecordFile's
_MAX_SPAN = 16 << 20
_INDEX_THREADS = 8


class TarShard(OwnDescriptor):
    """One tar shard read by local sample index. Picklable: the file handle is dropped and
    reopened on first read; the index travels along. A local file must stay the one indexed
    (`pinned`): a reopen that finds another or a changed file raises `CorruptDataError`."""

    def __init__(
        self,
        path: str | os.PathLike,
        index_dir: str | os.PathLike | None = None,
        remote: RemoteFile | None = None,
        decode: bool = True,
        copies: str | os.PathLike | None = None,
    ):
        """`copies`: the folder of gzip shards' decompressed copies (default: the cache
        folder's `wds/`)."""
        self.path = os.fspath(path)
        self.index_dir = None if index_dir is None else os.fspath(index_dir)
        if remote is None and is_remote_url(self.path):
            remote = RemoteFile.open(self.path)
        self.remote = remote
        self.pinned: FileIdentity | None = None
        folder = copies if copies is not None else os.path.join(default_cache_dir(), "wds")
        self.copies = os.fspath(folder)
        self.copy: tuple[str, FileIdentity] | None = None  # a gzip shard's copy, as pinned
        self._init_descriptor()
        self.index_path, self.index = (
            self._local_index() if remote is None else self._remote_index(remote)
        )
        self._decoders = self._field_decoders(decode)
        self._members = (
            self.index.first,
            self.index.offsets.astype(np.int64),
            self.index.sizes.astype(np.int64),
        )

    def _field_decoders(self, decode: bool) -> list[Callable[[bytes], Any] | None]:
        if not decode:
            return [None] * len(self.index.fields)
        for field_id, field in enumerate(self.index.fields):
            if refused(field):
                raise CorruptDataError(
                    f"{self.path}: member {self._first_with(field_id)} is a pickle "
                    f"(.{field.rsplit('.', 1)[-1]}), and tpufeed unpickles nothing read from "
                    "data (it could run any code). Rewrite the field as .npy, .json or .cls, "
                    "or pass decode=False to get every field's bytes undecoded",
                    path=self.path,
                )
        for field_id, field in enumerate(self.index.fields):
            require(field, f"{self.path}: member {self._first_with(field_id)}")
        return [decoder_for(field) for field in self.index.fields]

    def _first_with(self, field_id: int) -> str:
        """The name of the first member of field `field_id` (key.field)."""
        member = int(np.flatnonzero(self.index.field_ids == field_id)[0])
        sample = int(np.searchsorted(self.index.first, member, side="right") - 1)
        return f"{self.index.keys[sample]}.{self.index.fields[field_id]}"

    def _local_index(self) -> tuple[str | None, TarIndex]:
        """The index of a local tar, pinned as it is opened here: loaded if one made from
        this very file (its identity) is whole, else scanned and saved."""
        fd, self.pinned = open_pinned(self.path)
        identity, size = self.pinned.key(), self.pinned.size
        try:
            places = local_places(self.path, self.pinned, self.index_dir)
            if os.pread(fd, 2, 0) == GZIP_MAGIC:
                return self._copy_index(self.pinned, fd, size, places, identity)
            found = load_index(places, identity, size, self.path)
            if found is not None:
                return found
            index = scan_tar(partial(_pread, fd), self.path, size, LOCAL_WINDOW)
        finally:
            os.close(fd)
        return save_index(places, identity, size, index, self.path), index

    def _remote_index(self, remote: RemoteFile) -> tuple[str | None, TarIndex]:
        """An object's index is keyed by its version (generation or ETag): scanned from the
        cached copy, or from ranged GETs of its headers with a cache of 0 bytes."""
        obj = remote.obj
        directory = self.index_dir or os.path.join(remote.cache.root, "tar-index")
        places = remote_places(obj, directory)
        identity = remote_identity(obj)
        if self.path.lower().endswith(GZIP_SUFFIXES):
            if not remote.cached:
                raise InvalidArgumentError(
                    f"{self.path}: a gzip tar is decompressed from the shard cache's copy, "
                    "and a cache of 0 bytes keeps none: give cache_bytes"
                )
            with remote.pinned():
                fd = remote.open_copy()
                try:
                    return self._copy_index(obj.version, fd, obj.size, places, identity)
                finally:
                    os.close(fd)
        found = load_index(places, identity, obj.size, self.path)
        if found is not None:
            return found
        if remote.cached:
            with remote.pinned():
                fd = remote.open_copy()
                try:
                    index = scan_tar(partial(_pread, fd), self.path, obj.size, LOCAL_WINDOW)
                finally:
                    os.close(fd)
        else:
            index = scan_tar(partial(_ranged, remote), self.path, obj.size, REMOTE_WINDOW)
        return save_index(places, identity, obj.size, index, self.path), index

    def _copy_index(
        self, version: FileIdentity | str, fd: int, size: int, places: list[Place], identity: str
    ) -> tuple[str | None, TarIndex]:
        """A gzip shard's index, made from its decompressed copy (made first where none is
        whole), which its samples are then read from, pinned as it is now."""
        copy, found = tar_copy(self.path, version, fd, size, self.copies)
        try:
            self.copy = (copy, found.identity)
            indexed = load_index(places, identity, found.size, self.path)
            if indexed is not None:
                return indexed
            index = scan_tar(partial(_pread, found.fd), self.path, found.size, LOCAL_WINDOW)
        finally:
            os.close(found.fd)
        return save_index(places, identity, found.size, index, self.path), index

    def __len__(self) -> int:
        return len(self.index)

    def _descriptor(self) -> int:
        with self._lock:
            if self._fd is None and self.copy is None:
                self._fd = open_regular(self.path, pinned=self.pinned)
            elif self._fd is None and self.copy is not None:
                if self.remote is None:  # the shard itself must still be the one copied
                    os.close(open_regular(self.path, pinned=self.pinned))
                self._fd = open_regular(self.copy[0], pinned=self.copy[1])
            return self._fd  # type: ignore[return-value]  # opened above

    def read(self, indices: np.ndarray) -> list[Any]:  # dicts, where RecordFile says bytes
        """The samples at local `indices`, in that order."""
        n = len(self)
        idx = checked_indices(
            indices, n, lambda bad: f"{self.path}: sample index {bad} is out of range ({n} samples)"
        )
        if self.remote is None or self.copy is not None:
            fd = self._descriptor()
            return [self._sample(i, self._pread(fd, i)) for i in idx.tolist()]
        if not self.remote.cached:
            return self._read_ranges(self.remote, idx)
        with self.remote.pinned():
            fd = self.remote.open_copy()
            try:
                return [self._sample(i, self._pread(fd, i)) for i in idx.tolist()]
            finally:
                os.close(fd)

    def record_reader(self) -> Callable[[int], dict[str, Any]] | None:
        """One sample by local index, the fastest path (local shards and copies); None for
        gs://."""
        if self.remote is not None and self.copy is None:
            return None
        fd = self._descriptor()
        return lambda i: self._sample(i, self._pread(fd, i))

    def _span(self, i: int) -> tuple[int, int]:
        first, offsets, sizes = self._members
        a, b = int(first[i]), int(first[i + 1]) - 1
        start = int(offsets[a])
        return start, int(offsets[b] + sizes[b]) - start

    def _pread(self, fd: int, i: int) -> bytes:
        start, length = self._span(i)
        data = os.pread(fd, length, start)
        if len(data) != length:
            raise self._damaged(i, "the file is shorter than when its index was built")
        return data

    def _read_ranges(self, remote: RemoteFile, idx: np.ndarray) -> list[dict[str, Any]]:
        """Just the samples asked for, as parallel ranged GETs of nearby samples coalesced."""
        wanted = np.unique(idx).tolist()
        spans = [self._span(i) for i in wanted]
        merged = coalesce([(s, s + n) for s, n in spans], _MAX_GAP, _MAX_SPAN)
        blobs = remote.read_ranges(merged)
        starts = [s for s, _ in merged]
        found = {}
        for i, (start, length) in zip(wanted, spans):
            w = int(np.searchsorted(starts, start, side="right") - 1)
            rel = start - merged[w][0]
            found[i] = blobs[w][rel : rel + length]
        return [self._sample(i, found[i]) for i in idx.tolist()]

    def _sample(self, i: int, span: bytes) -> dict[str, Any]:
        index = self.index
        first, offsets, sizes = self._members
        a, b = int(first[i]), int(first[i + 1])
        base = int(offsets[a])
        key = index.keys[i]
        sample: dict[str, Any] = {"__key__": key, "__url__": self.path}
        counts.count("bytes_read", len(span))
        for m in range(a, b):
            field_id = int(index.field_ids[m])
            start = int(offsets[m]) - base
            data = span[start : start + int(sizes[m])]
            decode = self._decoders[field_id]
            if decode is not None:
                try:
                    sample[index.fields[field_id]] = decode(data)
                except Exception as e:
                    field = index.fields[field_id]
                    raise self._damaged(
                        i, f"member {key}.{field} cannot be decoded: {type(e).__name__}: {e}"
                    ) from e
            else:
                sample[index.fields[field_id]] = data
        return sample

    def _damaged(self, i: int, cause: str) -> CorruptDataError:
        return CorruptDataError(
            f"{self.path}: sample {i} (key {self.index.keys[i]!r}): {cause}",
            path=self.path,
            record=i,
        )

    def release_if_evicted(self) -> None:
        """Nothing to release: a cached copy is open only while a read holds it."""

    def __repr__(self) -> str:
        return f"TarShard({self.path!r}, {len(self)} samples)"


def _pread(fd: int, offset: int, length: int) -> bytes:
    return os.pread(fd, length, offset)


def _ranged(remote: RemoteFile, offset: int, length: int) -> bytes:
    return remote.read_ranges([(offset, offset + length)])[0] if length else b""


class WebDatasetSource(ShardedSource[TarShard]):
    """The samples of the WebDataset tar shards named by `paths` (paths or globs), in shard
    order then member order: WebDataset's own order without a shuffle. gs:// shards go through
    `cache` (default: `ShardCache()`; `ShardCache(max_bytes=0)`: ranged GETs)."""

    def __init__(
        self,
        paths: PathsLike,
        index_dir: str | os.PathLike | None = None,
        cache: ShardCache | None = None,
        decode: bool = True,
    ):
        items = resolve_paths(shard_paths(paths), cache.retry if cache else None)
        if any(isinstance(p, RemoteObject) for p in items):
            cache = cache or ShardCache()
        copies = os.path.join(cache.root if cache else default_cache_dir(), "wds")

        def make(item: str | RemoteObject) -> TarShard:
            if isinstance(item, RemoteObject):
                if cache is None:  # set above whenever a path is in an object store
                    raise TpufeedError(f"{item.url}: a remote file needs a shard cache")
                return TarShard(item.url, index_dir, RemoteFile(item, cache), decode, copies)
            return TarShard(item, index_dir, decode=decode, copies=copies)

        shards = map_in_threads(make, items, _INDEX_THREADS if cache is not None else 1)
        super().__init__(shards)

    def _count_read(self, records: list[Any]) -> None:
        """Samples are dicts: their bytes are counted as each is read (`TarShard._sample`)."""
