"""One MDS shard read by local record index: checked once, then each record one `pread`.

Every file is opened through `storage.opener`: a regular file only, inside the dataset root,
pinned. On a shard's first read the raw file it is read from is chosen and checked once:

- an uncompressed shard is that file, pinned when the dataset was opened and hash-checked;
- beside a compressed shard, the raw file Streaming leaves (`shard.N.mds`, its twin) is read
  when it holds the raw size: pinned and hash-checked;
- otherwise the compressed shard is decompressed into a local copy (`mds.copies`), a derived
  file checked on its first use in each process.

Every later open (a worker's, after a fork or a pickle) checks the pin: a file renamed over the
one checked, or a link put in its place, raises `CorruptDataError` instead of being read. Then
the offset table is read (its size checked against the file first), and each record is one
`pread` and a decode (`ShardInfo.decode`).

gs:// shards are fetched whole into the shard cache (read-ahead follows the plan, as for every
gs:// source): an uncompressed one is read from its cached copy while pinned, a compressed one
decompressed from it into a local copy named by the object's generation or ETag.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import numpy as np

from tpufeed.errors import CorruptDataError, SourceNotFoundError
from tpufeed.observe import counts
from tpufeed.sources.descriptor import OwnDescriptor
from tpufeed.sources.mds.copies import decompressed_copy
from tpufeed.sources.mds.hashes import checked_hash, descriptor_chunks
from tpufeed.sources.mds.layout import ShardInfo, offset_table
from tpufeed.sources.sharded import checked_indices
from tpufeed.storage.opener import FileIdentity, open_pinned, open_regular
from tpufeed.storage.remote import RemoteFile

__all__ = ["MDSShard", "checked_hash"]


class RawFile(NamedTuple):
    """The uncompressed file a shard's records are read from, as first opened and checked: its
    path, the `size` of the shard in it (a copy's trailer lies after), its pin, and whether it
    is a decompressed copy (reopened through its CRC32C check, not by the pin alone)."""

    path: str
    size: int
    pin: FileIdentity
    derived: bool


class MDSShard(OwnDescriptor):
    """One shard of an MDS dataset (a `RecordFile` of sample dicts). `path` is the file the
    dataset holds (the compressed one when compressed), inside the dataset folder `root`;
    `twin` the raw file Streaming may leave beside a compressed one; `remote` its gs:// object,
    if it is one. Picklable: a copy opens its files again on its first read, checking pins."""

    def __init__(
        self,
        path: str,
        info: ShardInfo,
        copies_dir: str,
        remote: RemoteFile | None = None,
        root: str | None = None,
        twin: str | None = None,
    ):
        self.path = path
        self.info = info
        self.remote = remote
        self.copies_dir = copies_dir
        self.root = root
        self.twin = twin
        self.pinned: FileIdentity | None = None
        if remote is None:
            fd, self.pinned = open_pinned(path, root=root)
            os.close(fd)
            if self.pinned.size != info.stored["bytes"]:
                raise CorruptDataError(
                    f"{path}: {self.pinned.size:,} bytes, the index says "
                    f"{info.stored['bytes']:,} (truncated or replaced?)",
                    path=path,
                )
        self._offsets: np.ndarray | None = None
        self._raw: RawFile | None = None  # chosen and checked on the first read
        self._refused: CorruptDataError | None = None  # why this shard cannot be read at all
        self._init_descriptor()  # `_fd`: of the raw file, while it stays the one read

    def __len__(self) -> int:
        return self.info.samples

    def read(self, indices: np.ndarray) -> list[Any]:  # dicts, where RecordFile says bytes
        """The sample dicts at local `indices`, in that order; reads go in file order."""
        n = len(self)
        idx = checked_indices(
            indices, n, lambda bad: f"{self.path}: record {bad} is out of range for {n} records"
        )
        if self.remote is not None and self.info.zip is None:
            with self.remote.pinned() as local:  # the cached copy, held while it is read
                fd = open_regular(local, shown=self.path)
                try:
                    if self._offsets is None:
                        size = os.fstat(fd).st_size
                        self._offsets = self._prepared(lambda: self._checked(fd, size), idx)
                    return self._read_fd(fd, idx)
                finally:
                    os.close(fd)
        with self._lock:
            if self._fd is None:
                self._fd = self._prepared(self._open_raw, idx)
            fd = self._fd
        return self._read_fd(fd, idx)

    def _prepared(self, prepare: Callable[[], Any], idx: np.ndarray) -> Any:
        """`prepare()`, once: a shard refused as a whole (its hash, count or offset table) is
        remembered, so skipping its records (`ignore_errors`) does not check it again for each;
        the error names the first record asked for."""
        if self._refused is None:
            try:
                return prepare()
            except CorruptDataError as error:
                self._refused = error
        first = int(idx[0]) if idx.size else None
        raise CorruptDataError(
            f"{self.path} record {first} cannot be read: {self._refused}",
            path=self.path,
            record=first,
        ) from self._refused

    def _read_fd(self, fd: int, idx: np.ndarray) -> list[dict[str, Any]]:
        offsets = self._offsets
        assert offsets is not None  # set by _prepare before any read
        starts, ends = offsets[idx].tolist(), offsets[idx + 1].tolist()
        records = idx.tolist()
        out: list[Any] = [None] * idx.size
        total = 0
        decode, path = self.info.decode, self.path
        for i in np.argsort(idx, kind="stable").tolist():
            start, size = starts[i], ends[i] - starts[i]
            data = os.pread(fd, size, start)
            if len(data) != size:
                raise CorruptDataError(
                    f"{path} record {records[i]}: the file ends inside it (truncated?)",
                    path=path,
                    record=records[i],
                )
            total += size
            out[i] = decode(data, path, records[i])
        counts.count("bytes_read", total)
        return out

    def _open_raw(self) -> int:
        """A descriptor of the raw file, checked (first open) or its pin checked (later)."""
        fd, self._raw = self._reopened() if self._raw is not None else self._chosen()
        try:
            if self._offsets is None:
                self._offsets = offset_table(fd, self._raw.size, self.info, self.path)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _reopened(self) -> tuple[int, RawFile]:
        raw = self._raw
        assert raw is not None  # chosen by an earlier read, maybe in the parent process
        if raw.derived:
            return self._copy()  # checked once in each process, made again if it went bad
        fd = open_regular(raw.path, pinned=raw.pin, root=self.root)
        return fd, raw

    def _chosen(self) -> tuple[int, RawFile]:
        """The raw file to read, opened and checked: the shard itself, its twin, or a copy."""
        if self.info.zip is not None:
            twin = self._open_twin()
            return twin if twin is not None else self._copy()
        assert self.pinned is not None  # a local shard (gs:// ones are read in `read`)
        fd = open_regular(self.path, pinned=self.pinned, root=self.root)
        try:
            self._checked(fd, self.pinned.size)
        except BaseException:
            os.close(fd)
            raise
        return fd, RawFile(self.path, self.pinned.size, self.pinned, derived=False)

    def _checked(self, fd: int, size: int) -> np.ndarray:
        """An uncompressed shard's offsets, once its bytes (read from `fd`) pass its hash."""
        checked_hash(self.info.raw["hashes"], descriptor_chunks(fd, size), self.path)
        return offset_table(fd, size, self.info, self.path)

    def _open_twin(self) -> tuple[int, RawFile] | None:
        """The raw file Streaming left beside a compressed shard, pinned and hash-checked; None
        if there is none, or it is not whole (Streaming may still be writing it)."""
        if self.twin is None:
            return None
        try:
            fd, pin = open_pinned(self.twin, root=self.root)
        except SourceNotFoundError:
            return None
        try:
            if pin.size != self.info.raw["bytes"]:
                os.close(fd)
                return None
            checked_hash(self.info.raw["hashes"], descriptor_chunks(fd, pin.size), self.twin)
        except BaseException:
            os.close(fd)
            raise
        return fd, RawFile(self.twin, pin.size, pin, derived=False)

    def _copy(self) -> tuple[int, RawFile]:
        """The decompressed copy, found (checked) or made now."""
        if self.remote is not None:
            version: FileIdentity | str = self.remote.obj.version
        else:
            assert self.pinned is not None
            version = self.pinned
        path, copy = decompressed_copy(
            self.info, self.path, version, self.copies_dir, self._open_compressed
        )
        return copy.fd, RawFile(path, copy.size, copy.identity, derived=True)

    @contextlib.contextmanager
    def _open_compressed(self) -> Iterator[int]:
        """A descriptor of the compressed shard as pinned (a gs:// one's cached copy, held)."""
        with contextlib.ExitStack() as stack:
            if self.remote is not None:
                local = stack.enter_context(self.remote.pinned())
                fd = open_regular(local, shown=self.path)
            else:
                fd = open_regular(self.path, pinned=self.pinned, root=self.root)
            stack.callback(os.close, fd)
            yield fd

    def release_if_evicted(self) -> None:
        """Nothing to release: a cached copy is held only while a read uses it."""

    def __repr__(self) -> str:
        return f"MDSShard({self.path!r}, {len(self)} samples)"
