"""One shard of a built dataset, checked against its manifest entry before its records are used.

A local shard is read once in full for its size and CRC32C. A gs:// shard is checked by its
object metadata (GCS keeps every object's size and CRC32C, and the shard cache checks each
download against them), so checking it downloads nothing; its reads then go through the shard
cache like any gs:// file. Either way the record count is compared when the shard is opened:
on its first read, or when `verify()` is called.

A local shard is pinned when the dataset is opened (`pinned`, a `FileIdentity`): the check, and
every reader opened later (in workers too), must find that very file, unchanged, under its path.
A symlink, hard link or rename swapped in, a truncation or a rewrite raises `CorruptDataError`.

A shard whose CRC32C differs from the manifest's is refused by `verify()`. On a read, a format
that checks its records itself (`FileFormat.checks_records`: ArrayRecord's chunk hashes,
TFRecord's record CRCs) is read through once to tell damage from a replaced file: if some
record fails its own check, the shard is damaged there, and only the records of the damaged
chunks fail (each named, each one bad record for `ignore_errors`); if every record checks out,
the file is not the one the manifest describes (or its damage lies outside the records), and
the whole shard is refused. That read costs one pass over the shard, on this path only. A
shard refused as damaged or replaced is remembered, so skipping its records does not read it
again for each one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import google_crc32c
import numpy as np

from tpufeed.errors import CorruptDataError, SourceError, SourceNotFoundError
from tpufeed.sources._after_fork import forget_in_children
from tpufeed.sources.formats import FileFormat, get_format
from tpufeed.storage.cache import layout as cache_layout
from tpufeed.storage.opener import FileIdentity, open_regular
from tpufeed.storage.remote import RemoteFile

__all__ = ["VerifiedShard", "file_crc32c"]

_CRC_CHUNK = 8 << 20
_SCAN_RECORDS = 1024  # records read at a time when a shard whose CRC32C differs is read through
log = logging.getLogger("tpufeed")


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
        root: str | None = None,
    ):
        self.path = path
        self.remote = remote
        self.pinned = pinned
        self.root = root  # the dataset's folder, which a local shard may not leave
        self.num_records: int = entry["num_records"]
        self.num_bytes: int = entry["num_bytes"]
        self.crc32c: str = entry["crc32c"]
        self.file_format = file_format
        self._format: FileFormat = get_format(file_format, "the manifest's file_format")
        self.verified = False
        self.damaged: int | None = None  # the first damaged record, once a read found one
        self._refused: CorruptDataError | None = None  # why reads of this shard fail
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
        mismatch = None if self.verified else self._checksum_mismatch()
        if mismatch is not None:
            raise mismatch
        self.verified = True

    def _checksum_mismatch(self) -> CorruptDataError | None:
        """Checks the size (raising) and returns the error for a CRC32C that differs."""
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
            return CorruptDataError(
                f"{self.path}: CRC32C is {crc}, the manifest says "
                f"{self.crc32c}: the shard is corrupted or was replaced",
                path=self.path,
            )
        return None

    def _local_crc32c(self) -> tuple[int, str]:
        """(size, CRC32C) of the local shard, read through one descriptor of the pinned file
        (pinned now if it was not yet)."""
        with os.fdopen(
            open_regular(self.path, pinned=self.pinned, root=self.root), "rb", buffering=0
        ) as f:
            st = os.fstat(f.fileno())
            crc = 0
            while chunk := f.read(_CRC_CHUNK):
                crc = google_crc32c.extend(crc, chunk)
        self.pinned = FileIdentity.of(st)
        return st.st_size, f"{crc:08x}"

    def _open(self) -> Any:
        with self._lock:
            if self._file is None:
                if self._refused is not None:
                    raise self._refused
                try:
                    self._file = self._open_checked()
                except CorruptDataError as e:
                    self._refused = e  # the file's bytes do not change by reading them again
                    raise
            return self._file

    def _open_checked(self) -> Any:
        mismatch = None if self.verified else self._checksum_mismatch()
        if mismatch is not None and not self._format.checks_records:
            raise mismatch
        opened = self._format.open_file(self.path, self.remote, self.pinned, self.root)
        count = len(opened)
        if count != self.num_records:
            opened.close()
            raise CorruptDataError(
                f"{self.path}: shard holds {count} records, the manifest says {self.num_records}",
                path=self.path,
            )
        if mismatch is None:
            self.verified = True
        else:
            self._find_damage(opened, mismatch)
        return opened

    def _find_damage(self, opened: Any, mismatch: CorruptDataError) -> None:
        """Reads a shard whose CRC32C differs through, for a record that fails the format's own
        check; raises `mismatch` (a replaced file) if none does."""
        for start in range(0, self.num_records, _SCAN_RECORDS):
            try:
                opened.read(np.arange(start, min(start + _SCAN_RECORDS, self.num_records)))
            except CorruptDataError as e:
                if e.record is None:
                    opened.close()
                    raise
                self.damaged = e.record
                log.warning(
                    "%s is damaged (its CRC32C differs from the manifest's); the records of its "
                    "damaged chunks cannot be read, the first is record %d",
                    self.path,
                    e.record,
                )
                return
        opened.close()
        raise CorruptDataError(
            f"{mismatch}: every record passes the format's own checks, so the file is not "
            "the one the manifest describes; build the dataset again or restore the shard",
            path=self.path,
        )

    def read(self, indices: np.ndarray) -> list[bytes]:
        if self._file is not None:
            return self._file.read(indices)
        try:
            opened = self._open()
        except CorruptDataError as e:  # the whole shard is unreadable: name the record asked for
            first = int(np.asarray(indices).reshape(-1)[0]) if len(indices) else None
            raise CorruptDataError(
                f"{self.path} record {first} cannot be read: {e}", path=self.path, record=first
            ) from e
        return opened.read(indices)

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
