"""TFRecord files read by record index: one verified scan builds a cached offset index.

A record is `uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)`,
all little-endian. The index (data offset and length of every record) is cached next to the file
as `<path>.tpufeed-index`, or under `index_dir` when that is given or the file's directory is not
writable, and is rebuilt whenever the file's size or mtime changes.

>>> write_tfrecords("/tmp/a.tfrecord", [b"x", b"yz"])  # doctest: +SKIP
2
>>> TFRecordSource("/tmp/*.tfrecord").__getitems__([1, 0])  # doctest: +SKIP
[b'yz', b'x']
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
import warnings
from collections.abc import Callable, Iterable
from typing import BinaryIO

import google_crc32c
import numpy as np

from tpufeed.errors import (
    CorruptDataError,
    InvalidArgumentError,
    RecordIndexError,
    SourceNotFoundError,
)
from tpufeed.sources.sharded import ShardedSource
from tpufeed.storage.local import PathsLike, expand_paths

__all__ = ["TFRecordFile", "TFRecordSource", "default_index_dir", "write_tfrecords"]

INDEX_SUFFIX = ".tpufeed-index"
_HEADER = struct.Struct("<QI")  # length, masked crc of the 8 length bytes
_CRC = struct.Struct("<I")
_FRAMING = _HEADER.size + _CRC.size  # 16 bytes around every record's data
_SCAN_CHUNK = 16 << 20
# Index file: one uint64 array [magic, version, size, mtime_ns, n, offsets[n], lengths[n]].
_INDEX_MAGIC = int.from_bytes(b"TPFIDX\x00\x00", "little")
_INDEX_VERSION = 1
_INDEX_FIELDS = 5
_U64 = (1 << 64) - 1


def _masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def default_index_dir() -> str:
    """Where indexes go when the data file's directory is not writable.

    `$TPUFEED_CACHE_DIR/tfrecord-index` if that variable is set, else
    `~/.cache/tpufeed/tfrecord-index`; read at each call, not at import.
    """
    root = os.environ.get("TPUFEED_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "tpufeed")
    return os.path.join(root, "tfrecord-index")


def _cached_index_name(path: str) -> str:
    absolute = os.path.abspath(path)
    digest = hashlib.sha256(absolute.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return f"{digest}-{os.path.basename(absolute)[:100]}{INDEX_SUFFIX}"


def _atomic_write(path: str, write: Callable[[BinaryIO], object], *, durable: bool) -> None:
    """Writes `path` through a temporary name in the same directory, then renames it.

    `durable` fsyncs before the rename; an index is a cache that is checked on load, so it skips
    that cost.
    """
    tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        with open(tmp, "xb") as f:
            write(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_tfrecords(path: str | os.PathLike, records: Iterable[bytes]) -> int:
    """Writes `records` as a TFRecord file (atomically: temp name, then rename); returns the count."""
    path = os.fspath(path)
    count = 0

    def write(f: BinaryIO) -> None:
        nonlocal count
        for record in records:
            if not isinstance(record, (bytes, bytearray, memoryview)):
                raise InvalidArgumentError(
                    f"{path}: record {count} is {type(record).__name__}, not bytes: {record!r:.80}")
            data = bytes(record)
            length = struct.pack("<Q", len(data))
            f.write(length)
            f.write(_CRC.pack(_masked_crc(length)))
            f.write(data)
            f.write(_CRC.pack(_masked_crc(data)))
            count += 1

    _atomic_write(path, write, durable=True)
    return count


def scan_records(fd: int, path: str, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Reads the whole file once, verifying every CRC; returns (data offsets, lengths) as uint64.

    Reads in 16 MiB chunks (more for a larger record); raises CorruptDataError on a bad CRC or a
    record cut off by the end of the file.
    """
    offsets: list[int] = []
    lengths: list[int] = []
    buf = b""
    base = 0  # file offset of buf[0]
    pos = 0  # file offset of the next record
    while pos < size:
        record = len(offsets)
        if pos + _HEADER.size > size:
            raise _corrupt(path, record, pos, f"torn record: the file ends {size - pos} bytes "
                           f"into its {_HEADER.size}-byte header")
        if pos + _HEADER.size > base + len(buf):
            buf, base = os.pread(fd, _SCAN_CHUNK, pos), pos
            if len(buf) < _HEADER.size:
                raise _corrupt(path, record, pos, "file shrank while its index was being built")
        rel = pos - base
        length, length_crc = _HEADER.unpack_from(buf, rel)
        if _masked_crc(buf[rel:rel + 8]) != length_crc:
            raise _corrupt(path, record, pos, "length CRC mismatch")
        end = pos + _FRAMING + length
        if end > size:
            raise _corrupt(path, record, pos, f"torn record: its length says {length} bytes of "
                           f"data but the file ends {end - size} bytes short")
        if end > base + len(buf):
            buf, base = os.pread(fd, max(_SCAN_CHUNK, end - pos), pos), pos
            rel = 0
            if end > base + len(buf):
                raise _corrupt(path, record, pos, "file shrank while its index was being built")
        start = rel + _HEADER.size
        if _masked_crc(buf[start:start + length]) != _CRC.unpack_from(buf, start + length)[0]:
            raise _corrupt(path, record, pos, "data CRC mismatch")
        offsets.append(pos + _HEADER.size)
        lengths.append(length)
        pos = end
    return np.array(offsets, dtype=np.uint64), np.array(lengths, dtype=np.uint64)


def _corrupt(path: str, record: int, offset: int, what: str) -> CorruptDataError:
    return CorruptDataError(f"{path}: record {record} at byte offset {offset}: {what}",
                            path=path, record=record)


def _index_array(size: int, mtime_ns: int, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    head = np.array([_INDEX_MAGIC, _INDEX_VERSION, size, mtime_ns & _U64, offsets.size],
                    dtype=np.uint64)
    return np.concatenate([head, offsets, lengths])


def _load_index(index_path: str, size: int, mtime_ns: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Returns (offsets, lengths) from `index_path` if it is whole and matches size and mtime."""
    try:
        with open(index_path, "rb") as f:
            arr = np.load(f, allow_pickle=False)
    except (OSError, ValueError, EOFError):
        return None
    if arr.dtype != np.uint64 or arr.ndim != 1 or arr.size < _INDEX_FIELDS:
        return None
    magic, version, isize, imtime, n = (int(v) for v in arr[:_INDEX_FIELDS])
    if (magic, version, isize, imtime) != (_INDEX_MAGIC, _INDEX_VERSION, size, mtime_ns & _U64):
        return None
    if arr.size != _INDEX_FIELDS + 2 * n:
        return None
    offsets = arr[_INDEX_FIELDS:_INDEX_FIELDS + n]
    lengths = arr[_INDEX_FIELDS + n:]
    # Records tile the file exactly; a damaged index fails this check and is rebuilt.
    ends = offsets + lengths + np.uint64(_CRC.size)
    starts = np.concatenate([np.zeros(1, np.uint64), ends])[:n] + np.uint64(_HEADER.size)
    if not np.array_equal(offsets, starts) or (int(ends[-1]) if n else 0) != size:
        return None
    return offsets.copy(), lengths.copy()


class TFRecordFile:
    """One TFRecord file read by local record index, each record's CRC checked on read.

    Picklable: the file handle is dropped and reopened on first read, the index travels along.
    """

    def __init__(self, path: str | os.PathLike, index_dir: str | os.PathLike | None = None):
        self.path = os.fspath(path)
        self.index_dir = None if index_dir is None else os.fspath(index_dir)
        self._file: BinaryIO | None = None
        self._lock = threading.Lock()
        self.index_path, self._offsets, self._lengths = self._load_or_build_index()

    def _index_candidates(self) -> list[str]:
        name = _cached_index_name(self.path)
        if self.index_dir is not None:
            return [os.path.join(self.index_dir, name)]
        return [self.path + INDEX_SUFFIX, os.path.join(default_index_dir(), name)]

    def _load_or_build_index(self) -> tuple[str | None, np.ndarray, np.ndarray]:
        try:
            f = open(self.path, "rb", buffering=0)
        except FileNotFoundError as e:
            raise SourceNotFoundError(f"no such file: {self.path}", path=self.path) from e
        with f:
            st = os.fstat(f.fileno())
            candidates = self._index_candidates()
            for index_path in candidates:
                found = _load_index(index_path, st.st_size, st.st_mtime_ns)
                if found is not None:
                    return index_path, *found
            offsets, lengths = scan_records(f.fileno(), self.path, st.st_size)
        arr = _index_array(st.st_size, st.st_mtime_ns, offsets, lengths)
        errors = []
        for index_path in candidates:
            try:
                os.makedirs(os.path.dirname(index_path) or ".", exist_ok=True)
                _atomic_write(index_path, lambda out: np.save(out, arr, allow_pickle=False),
                              durable=False)
                return index_path, offsets, lengths
            except OSError as e:
                errors.append(f"{index_path}: {e}")
        warnings.warn(f"{self.path}: cannot cache its record index ({'; '.join(errors)}); "
                      "it will be rebuilt on every open", stacklevel=3)
        return None, offsets, lengths

    def __len__(self) -> int:
        return int(self._offsets.size)

    def _fd(self) -> int:
        with self._lock:
            if self._file is None:
                self._file = open(self.path, "rb", buffering=0)
            return self._file.fileno()

    def read(self, indices: np.ndarray) -> list[bytes]:
        """Returns the records at local `indices`, in that order; reads go in file order."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self)
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            bad = int(idx[(idx < 0) | (idx >= n)][0])
            raise RecordIndexError(f"{self.path}: record index {bad} is out of range for a file "
                                   f"of {n} records")
        fd = self._fd()
        records = idx.tolist()
        offsets = self._offsets[idx].tolist()
        lengths = self._lengths[idx].tolist()
        out: list = [None] * idx.size
        # Offsets grow with the record index, so sorting indices sorts reads by position.
        for i in np.argsort(idx, kind="stable").tolist():
            offset, length, record = offsets[i], lengths[i], records[i]
            buf = os.pread(fd, length + _CRC.size, offset)
            if len(buf) != length + _CRC.size:
                raise _corrupt(self.path, record, offset - _HEADER.size,
                               "the file is shorter than when its index was built")
            data = buf[:length]
            if _masked_crc(data) != _CRC.unpack_from(buf, length)[0]:
                raise _corrupt(self.path, record, offset - _HEADER.size,
                               "data CRC mismatch on read (was the file changed after its "
                               "index was built?)")
            out[i] = data
        return out

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_file"] = None
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"TFRecordFile({self.path!r}, {len(self)} records)"


class TFRecordSource(ShardedSource):
    """The records of the TFRecord files named by `paths` (paths or globs), as one sequence."""

    def __init__(self, paths: PathsLike, index_dir: str | os.PathLike | None = None):
        # A glob like "data/*" also matches the indexes cached next to the files: skip them.
        # Files hold no handle until their first read, so a failure here leaks nothing.
        files = [p for p in expand_paths(paths) if INDEX_SUFFIX not in os.path.basename(p)]
        super().__init__([TFRecordFile(path, index_dir) for path in files])
