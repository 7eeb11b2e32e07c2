"""The record cache's files: one checked file per record, within a byte limit, shared by processes.

    <directory>/<key>/<record // 4096>/<record>   one record's entry: header, then its bytes
    <directory>/<key>/bytes                       the bytes its entries take (8 bytes, int)
    <directory>/<key>/writing.tmp-<writer>        a put under way: its records and their sizes
    <directory>/<key>.lock                        held shared by every process using <key>
    <directory>/.lock                             held while the limit is counted and reserved

`<key>` names what made the entries (`tpufeed.ops.cache`): entries of any other key are never
read, and a key that no running process holds is removed when another key opens the directory.
The limit counts the entries' file sizes, over every key in the directory; once an entry does
not fit it is not written (first come, first kept: nothing is evicted), and this process stops
trying.

An entry is written to a temporary name that carries its writer's host, pid and start time
(`tpufeed.storage.derived.temporary_name`), then renamed: readers see a whole entry or none, and
two processes writing one record leave one of their (equal) copies. A put first leaves a marker
naming the entries it reserved room for, and removes it when done. A writer killed in the middle
(SIGKILL, power loss) leaves its marker: the next process to open the key finds the marker's
writer gone, removes the dead writers' temporaries in the folders the marker names, and gives
back the room of the entries never written. Without such a marker, opening a key costs one
listing of its folder, never a walk of its entries.

An entry is read through the opener (`open_pinned`): anything but a regular file in its place (a
FIFO, a symlink) is never opened for reading. Its header holds the payload's length and a CRC32C of the
payload and of whose entry it is (key and record: an entry renamed or linked over another's
fails it). An entry that is not a regular file or fails them is removed, with a warning, and
the caller makes the record again. A write that fails (a full disk) removes its temporary, gives its room back and
ends this process's writing, with a warning: the pipeline goes on, uncached.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
import struct
import weakref
from collections.abc import Iterator

import google_crc32c

from tpufeed.errors import InvalidArgumentError, SourceError, SourceNotFoundError
from tpufeed.storage.derived import dead_temporary, remove_dead_temporaries, temporary_name
from tpufeed.storage.opener import open_pinned, open_regular

__all__ = ["RecordFiles"]

log = logging.getLogger("tpufeed.cache")

_MAGIC = b"TPFC"
_HEADER = struct.Struct("<4sIQ")  # magic, CRC32C of the payload, payload length: 16 bytes
_BUCKET = 4096  # entries per subdirectory
_COUNTER = struct.Struct("<q")
_MARKER = "writing"  # a put under way: <key>/writing.tmp-<host>-<pid>-<start>-<random>
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT)


class RecordFiles:
    """The entries of one key in `directory`, as this process reads and writes them."""

    def __init__(self, directory: str, key: str, max_bytes: int):
        self.directory, self.key, self.max_bytes = os.path.abspath(directory), key, max_bytes
        self.root = os.path.join(self.directory, key)
        self.full = False  # an entry did not fit, or a write failed: this process writes no more
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
            fd, identity = open_pinned(path, links=False)
        except SourceNotFoundError:
            return None
        except SourceError as error:  # not a regular file (a FIFO, a folder, a link): never read
            self._discard(record, path, f"is not an entry ({error})", counted=False)
            return None
        try:
            data = bytearray(identity.size)
            problem = _problem(data, _read_into(fd, data), self._seal(record))
        except OSError as error:
            problem = f"cannot be read ({error})"
        finally:
            os.close(fd)
        if problem is None:
            return data
        self._discard(record, path, problem, counted=True)
        return None

    def put(self, entries: list[tuple[int, bytes]]) -> int:
        """Writes the entries that fit within the limit, in order; how many it wrote."""
        self._open()
        if self.full or not entries:
            return 0
        sizes = [_HEADER.size + len(payload) for _, payload in entries]
        fit, written, marker = 0, 0, None
        try:  # a full disk may refuse even the count of reserved room
            fit = self._reserve(sizes)
            if fit:
                marker = self._mark(entries[:fit], sizes)
            for record, payload in entries[:fit]:
                self._write(record, payload)
                written += 1
        except BaseException as error:
            self._give_back(sum(sizes[written:fit]))
            if not isinstance(error, OSError):
                raise
            log.warning(
                "tpufeed cache: writing to %s failed (%s); this process writes no more entries "
                "and the pipeline goes on uncached",
                self.root,
                str(error),  # not the error: a handler keeping records would keep its frames
            )
            self.full = True
        finally:
            if marker is not None:
                with contextlib.suppress(OSError):
                    os.unlink(marker)
        return written

    def usage(self) -> int:
        """The bytes the entries of every key in the directory take, as counted."""
        with self._global_lock():
            return sum(_read_counter(path) for path in self._counters())

    def _write(self, record: int, payload: bytes) -> None:
        path = self.path(record)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = temporary_name(path)
        crc = google_crc32c.extend(google_crc32c.value(payload), self._seal(record))
        header = _HEADER.pack(_MAGIC, crc, len(payload))
        try:
            _write_new(tmp, [header, payload])
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def _seal(self, record: int) -> bytes:
        """What an entry's CRC32C covers after its payload: whose entry it is (key, record), so
        one moved or linked into another's place fails its check like a damaged one."""
        return f"\0{self.key}\0{record}".encode()

    def _mark(self, entries: list[tuple[int, bytes]], sizes: list[int]) -> str:
        """Leaves the marker of a put under way: each record and the room reserved for it."""
        marker = temporary_name(os.path.join(self.root, _MARKER))
        lines = "".join(f"{record} {size}\n" for (record, _), size in zip(entries, sizes))
        try:
            _write_new(marker, [lines.encode()])
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(marker)
            raise
        return marker

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

    def _give_back(self, size: int) -> None:
        if size:
            with contextlib.suppress(OSError), self._global_lock():
                self._add_to_counter(-size)

    def _discard(self, record: int, path: str, problem: str, counted: bool) -> None:
        """Removes a bad entry, with a warning; a sound file it replaced is counted no more."""
        log.warning(
            "tpufeed cache: the entry of record %d (%s) %s; it is removed and made again",
            record,
            path,
            problem,
        )
        with contextlib.suppress(OSError), self._global_lock():
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
                return
            size = os.lstat(path).st_size if counted else 0
            os.unlink(path)
            self._add_to_counter(-size)

    def _add_to_counter(self, change: int) -> None:
        """Under the global lock: this key's count, written in place (a rename over a file
        would flush its blocks to disk, on ext4, every time)."""
        fd = os.open(os.path.join(self.root, "bytes"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
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
        path = os.path.join(self.directory, ".lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _open(self) -> None:
        """Once per process: holds this key (shared), removes the keys nobody holds, and cleans
        up after this key's writers that died in the middle of a put."""
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        try:
            os.makedirs(self.root, exist_ok=True)
            self._lock_fd = os.open(
                f"{self.root}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644
            )
        except OSError as error:
            if error.errno not in _NO_ROOM:
                raise InvalidArgumentError(
                    f"cache({self.directory!r}): cannot create {self.root} ({error}); give "
                    "cache() a directory this process can write to, on local disk"
                ) from None
            log.warning(
                "tpufeed cache: %s (%s); the pipeline goes on uncached", self.root, str(error)
            )
            self.full = True
            return
        fcntl.flock(self._lock_fd, fcntl.LOCK_SH)
        weakref.finalize(self, _release, self._lock_fd, self._pid)  # held while this lives
        with self._global_lock():
            for name in os.listdir(self.directory):
                if name.endswith(".lock") and name != f"{self.key}.lock":
                    _remove_unheld(os.path.join(self.directory, name))
        self._recover()

    def _recover(self) -> None:
        """After a writer of this key died in a put (its marker is left): removes the dead
        writers' temporaries in the marker's folders, and gives back the room it reserved for
        entries that were never written."""
        dead = [name for name in os.listdir(self.root) if name.startswith(_MARKER)]
        dead = [name for name in dead if dead_temporary(name)]
        for name in dead:
            marker = os.path.join(self.root, name)
            with self._global_lock():
                try:
                    fd = open_regular(marker)
                except SourceError:  # another process has just cleaned up after it
                    continue
                with os.fdopen(fd, "rb") as f:
                    reserved = _reservations(f.read())
                if reserved is None:  # killed while leaving its marker: look everywhere
                    remove_dead_temporaries(self.root, recursive=True)
                else:
                    for folder in sorted({os.path.dirname(self.path(r)) for r, _ in reserved}):
                        remove_dead_temporaries(folder)
                    lost = [size for r, size in reserved if not os.path.lexists(self.path(r))]
                    self._add_to_counter(-sum(lost))
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(marker)
            log.info(
                "tpufeed cache: cleaned up after %s, a writer of %s that died", name, self.root
            )


def _release(fd: int, pid: int) -> None:
    """Closes the key's lock `fd` of process `pid` (a forked child has its own, not this)."""
    if os.getpid() == pid:
        with contextlib.suppress(OSError):
            os.close(fd)


def _problem(data: bytearray, read: int, seal: bytes) -> str | None:
    """What is wrong with an entry's bytes (`seal`: whose entry it must be), or None."""
    if read != len(data) or len(data) < _HEADER.size:
        return f"is {len(data)} bytes, too short for its header"
    magic, crc, length = _HEADER.unpack_from(data)
    if magic != _MAGIC or length != len(data) - _HEADER.size:
        return "has a damaged header"
    del data[: _HEADER.size]  # in place: the payload stays at the buffer's aligned start
    if google_crc32c.extend(google_crc32c.value(bytes(data)), seal) != crc:
        return "fails its CRC32C check (damaged, or another record's entry)"
    return None


def _read_into(fd: int, data: bytearray) -> int:
    """Fills `data` from `fd` (a short read repeated); the bytes read."""
    view, read = memoryview(data), 0
    while read < len(data):
        got = os.readv(fd, [view[read:]])
        if got == 0:
            break
        read += got
    return read


def _write_new(path: str, parts: list[bytes]) -> None:
    """Writes `parts` to a new file `path` (never one that is there)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        for part in parts:
            view = memoryview(part)
            while view:
                view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _reservations(text: bytes) -> list[tuple[int, int]] | None:
    """A marker's (record, size) lines; None for a marker cut short or not tpufeed's."""
    if not text.endswith(b"\n"):
        return None
    try:
        return [(int(r), int(s)) for r, s in (line.split() for line in text.splitlines())]
    except ValueError:
        return None


def _remove_unheld(lock_path: str) -> None:
    """Removes the entries of the key `lock_path` locks, unless a process holds it."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
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
