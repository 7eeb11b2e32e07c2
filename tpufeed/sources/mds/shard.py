"""One MDS shard read by local record index: hash-checked and decompressed once, then pread.

A shard is prepared once per process, on its first read: its file is checked against the
index's hash (the fastest of the listed algorithms that hashlib or xxhash computes), and a
compressed shard is decompressed, once, into a local copy (`<cache dir>/mds/`, keyed by the
file's identity: path, size and mtime, or a gs:// object's generation), checked against the
hash and size of its raw file; the copy is written under a lock and renamed into place, so
processes that need it at once decompress it once. Then its offset table is read, and each
record is one `pread` and a decode (`mds_format.ShardInfo.decode`).

gs:// shards are fetched whole into the shard cache (read-ahead follows the plan, as for every
gs:// source): an uncompressed one is read from its cached copy while pinned, a compressed one
decompressed from it into the local copy.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from tpufeed.errors import CorruptDataError, missing_dependency
from tpufeed.observe import counts
from tpufeed.sources.descriptor import OwnDescriptor
from tpufeed.sources.mds.layout import ShardInfo, read_offsets
from tpufeed.sources.sharded import checked_indices
from tpufeed.storage.opener import FileIdentity, open_regular
from tpufeed.storage.remote import RemoteFile

__all__ = ["MDSShard", "checked_hash"]

_CHUNK = 8 << 20
# Fastest first: one listed algorithm is checked (each detects damage alike).
_PREFERRED = ("xxh3_64", "xxh64", "xxh128", "xxh3_128", "xxh32", "md5", "sha1", "sha256")
_warned: set[str] = set()


def _hasher(name: str) -> Callable[[], Any] | None:
    if name.startswith("xxh"):
        try:
            import xxhash
        except ImportError:
            return None
        return getattr(xxhash, name, None)
    if name in hashlib.algorithms_available and not name.startswith("shake_"):
        return lambda: hashlib.new(name)
    return None


def checked_hash(hashes: dict[str, str], read: Callable[[], Any], shown: str) -> str | None:
    """Checks the bytes `read()` yields (chunks) against one of `hashes`; returns the algorithm
    used, or None when there is no hash or none this Python computes (warned once)."""
    names = sorted(hashes, key=lambda n: _PREFERRED.index(n) if n in _PREFERRED else 99)
    for name in names:
        make = _hasher(name)
        if make is None:
            continue
        digest = make()
        for chunk in read():
            digest.update(chunk)
        if digest.hexdigest() != hashes[name]:
            raise CorruptDataError(
                f"{shown}: its {name} is {digest.hexdigest()}, the index says {hashes[name]} "
                "(the shard is damaged, or was replaced after the index was written)",
                path=shown,
            )
        return name
    if names and not _warned.intersection(names):
        _warned.update(names)
        warnings.warn(
            f"{shown}: none of its hashes {names} can be computed here (xxh*: pip install "
            "xxhash), so it is read unchecked",
            stacklevel=3,
        )
    return None


def _file_chunks(path: str, pinned: FileIdentity | None = None) -> Callable[[], Any]:
    def chunks() -> Any:
        with os.fdopen(open_regular(path, pinned=pinned), "rb", buffering=0) as f:
            while chunk := f.read(_CHUNK):
                yield chunk

    return chunks


def _decompress(algorithm: str, data: bytes) -> bytes:
    if algorithm == "zstd":
        try:
            import zstandard
        except ImportError:
            raise missing_dependency("zstandard", "mds") from None
        # Streaming's zstd frames carry their size; a stream decompressor reads either kind.
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    if algorithm == "gz":
        import gzip

        return gzip.decompress(data)
    import bz2

    return bz2.decompress(data)


class MDSShard(OwnDescriptor):
    """One shard of an MDS dataset (a `RecordFile` of sample dicts). `path` is the file the
    dataset holds (the compressed one when compressed); `remote` its gs:// object, if it is one.
    Picklable: a copy prepares itself again on its first read (a decompressed copy is found)."""

    def __init__(
        self, path: str, info: ShardInfo, copies_dir: str, remote: RemoteFile | None = None
    ):
        self.path = path
        self.info = info
        self.remote = remote
        self.copies_dir = copies_dir
        self.pinned: FileIdentity | None = None
        if remote is None:
            st = os.fstat(fd := open_regular(path))
            os.close(fd)
            self.pinned = FileIdentity.of(st)
            if st.st_size != info.stored["bytes"]:
                raise CorruptDataError(
                    f"{path}: {st.st_size:,} bytes, the index says {info.stored['bytes']:,} "
                    "(truncated or replaced?)",
                    path=path,
                )
        self._offsets: np.ndarray | None = None
        self._raw_path: str | None = None  # a local raw file: this one, or a decompressed copy
        self._refused: CorruptDataError | None = None  # why this shard cannot be read at all
        self._init_descriptor()  # `_fd`: of the local raw file, while it stays the one read

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
                fd = open_regular(local)
                try:
                    if self._offsets is None:
                        self._offsets = self._prepared(lambda: self._prepare(fd, local), idx)
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
        """A descriptor of the local raw file, prepared (checked, decompressed) if not yet."""
        if self._raw_path is None:
            self._raw_path = self._local_raw()
        fd = open_regular(self._raw_path, shown=self.path, pinned=self._raw_pin())
        try:
            if self._offsets is None:
                self._offsets = self._prepare(fd, self._raw_path)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _raw_pin(self) -> FileIdentity | None:
        return self.pinned if self._raw_path == self.path else None

    def _prepare(self, fd: int, local: str) -> np.ndarray:
        """Checks an uncompressed shard's hash (a decompressed copy was checked when written),
        then reads its offset table."""
        if self.info.zip is None:
            checked_hash(self.info.raw["hashes"], _file_chunks(local), self.path)
        size = os.fstat(fd).st_size
        head = os.pread(fd, 4, 0)
        count = int.from_bytes(head, "little") if len(head) == 4 else 0
        table = os.pread(fd, 4 * (count + 1), 4) if count == self.info.samples else b""
        return read_offsets(head, table, self.info, self.path, size)

    def _local_raw(self) -> str:
        """The uncompressed file to read: the shard itself, the raw file Streaming left beside
        a compressed one, or a decompressed copy (made now if there is none yet)."""
        if self.info.zip is None:
            return self.path
        raw_beside = os.path.join(
            os.path.dirname(self.path), os.path.basename(self.info.raw["basename"])
        )
        if self.remote is None and _size_of(raw_beside) == self.info.raw["bytes"]:
            checked_hash(self.info.raw["hashes"], _file_chunks(raw_beside), raw_beside)
            return raw_beside
        if self.remote is not None:
            identity = f"{self.remote.url}#{self.remote.obj.generation}"
        else:
            assert self.pinned is not None
            identity = f"{os.path.abspath(self.path)}#{self.pinned.size}#{self.pinned.mtime_ns}"
        name = hashlib.sha256(identity.encode()).hexdigest()[:32]
        copy = os.path.join(self.copies_dir, f"{name}-{os.path.basename(self.path)[:100]}.raw")
        if _size_of(copy) == self.info.raw["bytes"]:
            return copy
        os.makedirs(self.copies_dir, exist_ok=True)
        with open(copy + ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be writing it right now
            if _size_of(copy) != self.info.raw["bytes"]:
                self._write_copy(copy)
        return copy

    def _write_copy(self, copy: str) -> None:
        zip_info = self.info.zip
        assert zip_info is not None and self.info.algorithm is not None
        if self.remote is not None:
            with self.remote.pinned() as local, open(local, "rb") as f:
                data = f.read()
        else:
            with os.fdopen(open_regular(self.path, pinned=self.pinned), "rb") as f:
                data = f.read()
        checked_hash(zip_info["hashes"], lambda: [data], self.path)
        try:
            raw = _decompress(self.info.algorithm, data)
        except Exception as error:
            if isinstance(error, ImportError):
                raise
            raise CorruptDataError(
                f"{self.path}: cannot be decompressed ({self.info.compression}): "
                f"{type(error).__name__}: {error}",
                path=self.path,
            ) from error
        if len(raw) != self.info.raw["bytes"]:
            raise CorruptDataError(
                f"{self.path}: decompresses to {len(raw):,} bytes, the index says "
                f"{self.info.raw['bytes']:,}",
                path=self.path,
            )
        checked_hash(self.info.raw["hashes"], lambda: [raw], f"{self.path} (decompressed)")
        tmp = f"{copy}.tmp-{os.getpid()}"
        with open(tmp, "wb") as out:
            out.write(raw)
        os.replace(tmp, copy)

    def release_if_evicted(self) -> None:
        """Nothing to release: a cached copy is held only while a read uses it."""

    def __repr__(self) -> str:
        return f"MDSShard({self.path!r}, {len(self)} samples)"


def _size_of(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None
