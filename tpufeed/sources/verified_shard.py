"""One shard of a built dataset, checked against its manifest entry before its records are used.

A local shard is read once in full for its size and CRC32C. A gs:// shard is checked by its
object metadata (GCS keeps every object's size and CRC32C, and the shard cache checks each
download against them), so checking it downloads nothing; its reads then go through the shard
cache like any gs:// file. Either way the record count is compared when the shard is opened:
on its first read, or when `verify()` is called.

A local shard is pinned when the dataset is opened (`pinned`, a `FileIdentity`): the check, and
every reader opened later (in workers too), must find that very file, unchanged, under its path.
A symlink, hard link or rename swapped in, a truncation or a rewrite raises `CorruptDataError`.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import google_crc32c
import numpy as np

from tpufeed.errors import CorruptDataError, SourceError, SourceNotFoundError
from tpufeed.sources._after_fork import forget_in_children
from tpufeed.sources.formats import FileFormat, get_format
from tpufeed.storage import cache_layout
from tpufeed.storage.local import FileIdentity, open_regular
from tpufeed.storage.remote import RemoteFile

__all__ = ["VerifiedShard", "file_crc32c"]

_CRC_CHUNK = 8 << 20


def file_crc32c(path: str) -> tuple[int, str]:
    """(size in bytes, CRC32C as 8 hex digits) of a local file, read in 8 MiB chunks."""
    return os.path.getsize(path), f"{cache_layout.file_crc32c(path):08x}"


def _object_crc32c(remote: RemoteFile) -> tuple[int, str]:
    """(size, CRC32C as 8 hex digits) of a gs:// object, from its metadata when GCS has one."""
    obj = remote.obj
    if obj.crc32c is not None:
        return obj.size, f"{obj.crc32c:08x}"
    if remote.cached:  # no checksum in the metadata: the bytes themselves are summed
        with remote.pinned() as local:
            return file_crc32c(local)
    crc = 0
    for start in range(0, obj.size, _CRC_CHUNK):
        crc = google_crc32c.extend(
            crc, remote.read_ranges([(start, min(start + _CRC_CHUNK, obj.size))])[0]
        )
    return obj.size, f"{crc:08x}"


class VerifiedShard:
    """A shard file that checks its size, CRC32C and record count against the manifest once.

    `len()` is the manifest's count and opens nothing; the first `read` (or `verify`) checks the
    file, then opens the reader. `remote` is the gs:// object (None for a local file), which is
    what `ShardedSource` fetches ahead. A local shard is the file `pinned` names (default: the
    one first checked). Picklable: a copy remembers whether it was verified, and its pin.
    """

    def __init__(
        self,
        path: str,
        entry: dict[str, Any],
        file_format: str,
        remote: RemoteFile | None = None,
        pinned: FileIdentity | None = None,
    ):
        self.path = path
        self.remote = remote
        self.pinned = pinned
        self.num_records: int = entry["num_records"]
        self.num_bytes: int = entry["num_bytes"]
        self.crc32c: str = entry["crc32c"]
        self.file_format = file_format
        self._format: FileFormat = get_format(file_format, "the manifest's file_format")
        self.verified = False
        self._file: Any = None  # the format's reader of this file, once opened
        self._lock = threading.Lock()
        forget_in_children(self)

    def __len__(self) -> int:
        return self.num_records

    def verify(self) -> None:
        """Checks size and CRC32C against the manifest (once)."""
        with self._lock:
            self._verify_locked()

    def check_count(self) -> None:
        """Checks size and CRC32C, then the record count against the manifest. A gs:// shard
        whose count means reading every record (TFRecord) is counted when first read instead."""
        if self.remote is None or self._format.counts_from_index:
            self._open()
        else:
            self.verify()

    def _verify_locked(self) -> None:
        if self.verified:
            return
        if self.remote is not None:
            size, crc = _object_crc32c(self.remote)
        else:
            try:  # a FIFO or a device is refused without blocking on it
                size, crc = self._local_crc32c()
            except SourceNotFoundError:
                raise SourceNotFoundError(
                    f"{self.path}: shard named in the manifest is missing", path=self.path
                ) from None
            except FileNotFoundError:
                raise SourceNotFoundError(
                    f"{self.path}: shard named in the manifest is missing", path=self.path
                ) from None
            except OSError as e:
                raise SourceError(f"{self.path}: cannot read: {e}", path=self.path) from e
        if size != self.num_bytes:
            raise CorruptDataError(
                f"{self.path}: shard is {size:,} bytes, the manifest says "
                f"{self.num_bytes:,} (truncated or replaced?)",
                path=self.path,
            )
        if crc != self.crc32c:
            raise CorruptDataError(
                f"{self.path}: CRC32C is {crc}, the manifest says "
                f"{self.crc32c}: the shard is corrupted or was replaced",
                path=self.path,
            )
        self.verified = True

    def _local_crc32c(self) -> tuple[int, str]:
        """(size, CRC32C) of the local shard, read through one descriptor of the pinned file
        (pinned now if it was not yet)."""
        with os.fdopen(open_regular(self.path, pinned=self.pinned), "rb", buffering=0) as f:
            st = os.fstat(f.fileno())
            crc = 0
            while chunk := f.read(_CRC_CHUNK):
                crc = google_crc32c.extend(crc, chunk)
        self.pinned = FileIdentity.of(st)
        return st.st_size, f"{crc:08x}"

    def _open(self) -> Any:
        with self._lock:
            if self._file is None:
                self._verify_locked()
                opened = self._format.open_file(self.path, self.remote, pinned=self.pinned)
                count = len(opened)
                if count != self.num_records:
                    opened.close()
                    raise CorruptDataError(
                        f"{self.path}: shard holds {count} records, the "
                        f"manifest says {self.num_records}",
                        path=self.path,
                    )
                self._file = opened
            return self._file

    def read(self, indices: np.ndarray) -> list[bytes]:
        return (self._file if self._file is not None else self._open()).read(indices)

    @contextlib.contextmanager
    def leased_record_reader(self) -> Iterator[Callable[[int], bytes] | None]:
        """The opened gs:// file's leased one-record reader, if it has one. Only the shards a
        batch touches are leased, so each is still checked on its first read."""
        opened = self._file if self._file is not None else self._open()
        lease = getattr(opened, "leased_record_reader", None)
        if lease is None:
            yield None
            return
        with lease() as reader:
            yield reader

    def release_if_evicted(self) -> None:
        """Closes the reader of a gs:// shard whose cached copy was evicted (frees its space)."""
        opened = self._file
        if opened is not None:
            opened.release_if_evicted()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_file"] = None
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        forget_in_children(self)

    def _after_fork_in_child(self) -> None:
        """In a forked child: a fresh lock (the opened file drops its own reader)."""
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"VerifiedShard({self.path!r}, {self.num_records} records, verified={self.verified})"
