"""The record cache's files: one checked file per record, within a byte limit, shared by processes.

    <directory>/<key>/<record // 4096>/<record>   one record's entry: header, then its bytes
    <directory>/<key>/bytes                       the bytes its entries take (8 bytes, int)
    <directory>/<key>.lock                        held shared by every process using <key>
    <directory>/.lock                             held while the limit is counted and reserved

`<key>` names what made the entries (`tpufeed.ops.cache`): entries of any other key are never
read, and a key that no running process holds is removed when another key opens the directory.
An entry is written to a temporary file, then renamed: readers see a whole entry or none, and
two processes writing one record leave one of their (equal) copies. The header holds the
payload's length and CRC32C: an entry that fails them is removed, with a warning, and the
caller makes the record again. The limit counts the entries' file sizes, over every key in the
directory; once an entry does not fit it is not written (first come, first kept: nothing is
evicted), and this process stops trying.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import logging
import os
import shutil
import struct
from collections.abc import Iterator

import google_crc32c

from tpufeed.errors import InvalidArgumentError

__all__ = ["RecordFiles"]

log = logging.getLogger("tpufeed.cache")

_MAGIC = b"TPFC"
_HEADER = struct.Struct("<4sIQ")  # magic, CRC32C of the payload, payload length: 16 bytes
_BUCKET = 4096  # entries per subdirectory
_COUNTER = struct.Struct("<q")
_names = itertools.count()


class RecordFiles:
    """The entries of one key in `directory`, as this process reads and writes them."""

    def __init__(self, directory: str, key: str, max_bytes: int):
        self.directory, self.key, self.max_bytes = os.path.abspath(directory), key, max_bytes
        self.root = os.path.join(self.directory, key)
        self.full = False  # an entry did not fit: this process writes no more
        self._pid = -1
        self._lock_fd = -1

    def __getstate__(self) -> dict[str, object]:
        return {"directory": self.directory, "key": self.key, "max_bytes": self.max_bytes}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["directory"], state["key"], state["max_bytes"])  # type: ignore[misc]

    def path(self, record: int) -> str:
        return os.path.join(self.root, f"{record // _BUCKET:05x}", str(record))

    def get(self, record: int) -> bytearray | None:
        """The payload of `record`'s entry (writable: arrays decoded from it are too), or None
        where there is none, or it failed its check (then it is removed, with a warning)."""
        self._open()
        path = self.path(record)
        try:
            with open(path, "rb") as f:
                data = bytearray(os.fstat(f.fileno()).st_size)
                read = f.readinto(data)
        except FileNotFoundError:
            return None
        problem = _problem(data, read)
        if problem is None:
            return data
        log.warning(
            "tpufeed cache: the entry of record %d (%s) %s; it is removed and made again",
            record,
            path,
            problem,
        )
        self._remove(path)
        return None

    def put(self, entries: list[tuple[int, bytes]]) -> int:
        """Writes the entries that fit within the limit, in order; how many it wrote."""
        self._open()
        if self.full or not entries:
            return 0
        sizes = [_HEADER.size + len(payload) for _, payload in entries]
        fit = self._reserve(sizes)
        try:
            for record, payload in entries[:fit]:
                self._write(record, payload)
        except OSError as error:  # a full or failing disk: the pipeline goes on uncached
            log.warning(
                "tpufeed cache: writing to %s failed (%s); no more entries", self.root, error
            )
            self.full = True
        return fit

    def usage(self) -> int:
        """The bytes the entries of every key in the directory take, as counted."""
        with self._global_lock():
            return sum(_read_counter(path) for path in self._counters())

    def _write(self, record: int, payload: bytes) -> None:
        path = self.path(record)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}-{next(_names)}"
        crc = google_crc32c.value(payload)
        with open(tmp, "wb") as f:
            f.write(_HEADER.pack(_MAGIC, crc, len(payload)))
            f.write(payload)
        os.replace(tmp, path)

    def _reserve(self, sizes: list[int]) -> int:
        """Counts as many of `sizes` as fit under the limit; how many."""
        with self._global_lock():
            used = sum(_read_counter(path) for path in self._counters())
            fit, total = 0, 0
            for size in sizes:
                if used + total + size > self.max_bytes:
                    self.full = True
                    break
                fit, total = fit + 1, total + size
            if total:
                self._add_to_counter(total)
        return fit

    def _remove(self, path: str) -> None:
        with self._global_lock():
            with contextlib.suppress(FileNotFoundError):
                size = os.stat(path).st_size
                os.remove(path)
                self._add_to_counter(-size)

    def _add_to_counter(self, change: int) -> None:
        """Under the global lock: this key's count, written in place (a rename over a file
        would flush its blocks to disk, on ext4, every time)."""
        fd = os.open(os.path.join(self.root, "bytes"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            data = os.pread(fd, _COUNTER.size, 0)
            count = _COUNTER.unpack(data)[0] if len(data) == _COUNTER.size else 0
            os.pwrite(fd, _COUNTER.pack(max(0, count + change)), 0)
        finally:
            os.close(fd)

    def _counters(self) -> list[str]:
        names = os.listdir(self.directory)
        return [os.path.join(self.directory, n, "bytes") for n in names if not n.endswith(".lock")]

    @contextlib.contextmanager
    def _global_lock(self) -> Iterator[None]:
        fd = os.open(os.path.join(self.directory, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _open(self) -> None:
        """Once per process: holds this key (shared), and removes the keys nobody holds."""
        if self._pid == os.getpid():
            return
        try:
            os.makedirs(self.root, exist_ok=True)
        except OSError as error:
            raise InvalidArgumentError(
                f"cache({self.directory!r}): cannot create {self.root} ({error}); give cache() "
                "a directory this process can write to, on local disk"
            ) from None
        self._lock_fd = os.open(f"{self.root}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self._lock_fd, fcntl.LOCK_SH)
        self._pid = os.getpid()
        with self._global_lock():
            for name in os.listdir(self.directory):
                if name.endswith(".lock") and name != f"{self.key}.lock":
                    _remove_unheld(os.path.join(self.directory, name))


def _problem(data: bytearray, read: int) -> str | None:
    """What is wrong with an entry's bytes, or None."""
    if read != len(data) or len(data) < _HEADER.size:
        return f"is {len(data)} bytes, too short for its header"
    magic, crc, length = _HEADER.unpack_from(data)
    if magic != _MAGIC or length != len(data) - _HEADER.size:
        return "has a damaged header"
    del data[: _HEADER.size]  # in place: the payload stays at the buffer's aligned start
    if google_crc32c.value(bytes(data)) != crc:
        return "fails its CRC32C check"
    return None


def _remove_unheld(lock_path: str) -> None:
    """Removes the entries of the key `lock_path` locks, unless a process holds it."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return
    try:
        shutil.rmtree(lock_path[: -len(".lock")], ignore_errors=True)
    finally:
        os.close(fd)


def _read_counter(path: str) -> int:
    try:
        with open(path, "rb") as f:
            data = f.read(_COUNTER.size)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    return _COUNTER.unpack(data)[0] if len(data) == _COUNTER.size else 0
