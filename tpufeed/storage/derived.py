"""Files tpufeed derives from a source file: indexes, decompressed copies, cache entries.

A derived file is named by its source's whole identity (`derived_name`): a local file's path,
device, inode, size and modification time, or an object's URL and version (GCS generation,
S3 ETag). A source replaced by another file, even one of the same size and time, never finds
the old file's index.

It is written once, atomically (`write_derived`): to a temporary name that carries the
writer's host, pid and start time, then renamed into place, so readers see a whole file or
none, and a temporary left by a writer that died is known as such and removed
(`remove_dead_temporaries`). A trailer after its bytes holds their length and CRC32C. On its
first use in each process (`open_derived`) the bytes are checked against it; a derived file
that fails the check, or that is not a regular file (a FIFO in its place is never opened for
reading, a symlink out of its folder), is removed with a warning, and the caller makes it
again.

>>> name = derived_name(path, identity, ".wds.tpufeed-index")  # doctest: +SKIP
>>> write_derived(os.path.join(directory, name), lambda f: f.write(index_bytes))  # doctest: +SKIP
>>> read_derived(os.path.join(directory, name), "the tar index of " + path)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import struct
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, NamedTuple

import google_crc32c

from tpufeed.errors import SourceError
from tpufeed.storage.opener import FileIdentity, open_regular

__all__ = [
    "Derived",
    "dead_temporary",
    "derived_name",
    "open_derived",
    "read_derived",
    "remove_dead_temporaries",
    "remove_dead_temporaries_once",
    "temporary_name",
    "write_derived",
]

_TRAILER = struct.Struct("<8sQI4x")  # magic, payload length, CRC32C of the payload: 24 bytes
_MAGIC = b"TPFDRV\x00\x01"
_CHECK_CHUNK = 8 << 20
_TMP = ".tmp-"
_verified: set[tuple[str, FileIdentity]] = set()  # (path, identity) checked in this process
_verified_lock = threading.Lock()
_swept: set[tuple[int, str]] = set()  # (pid, folder) whose dead temporaries were removed
_writers: dict[int, str] = {}  # by pid: a forked child names itself anew


class Derived(NamedTuple):
    """A derived file open for reading, its check passed: `size` bytes of payload (the trailer
    lies after them), `identity` to pin at a reopen."""

    fd: int
    size: int
    identity: FileIdentity


def derived_name(source: str, version: FileIdentity | str | int, suffix: str) -> str:
    """The file name of what is derived from `source` (a path, or a URL) as it is now:
    `version` is a local file's identity, or an object's generation or ETag."""
    where = source if "://" in source else os.path.abspath(source)
    stamp = version.key() if isinstance(version, FileIdentity) else str(version)
    digest = hashlib.sha256(f"{where}\0{stamp}".encode("utf-8", "surrogateescape")).hexdigest()[:32]
    base = os.path.basename(where.rstrip("/"))[:100]
    return f"{digest}-{base}{suffix}"


def temporary_name(path: str) -> str:
    """A temporary name beside `path`, known as this process's while it lives."""
    return f"{path}{_TMP}{_writer()}-{os.urandom(4).hex()}"


def write_derived(path: str, write: Callable[[BinaryIO], Any]) -> None:
    """Writes `path` through `write(file)`, then its trailer, atomically; a failure (a full
    disk) leaves no temporary file and raises the `OSError`."""
    tmp = temporary_name(path)
    try:
        with open(tmp, "xb") as raw:
            out = _Checksummed(raw)
            write(out)  # type: ignore[arg-type]  # the file methods a writer uses
            raw.write(_TRAILER.pack(_MAGIC, out.length, out.crc))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def open_derived(path: str, what: str, remade: bool = True) -> Derived | None:
    """`path` open for reading if it is there and whole; None if it is missing, or was bad (it
    is then removed, with a warning naming `what`, e.g. "the tar index of x.tar", and saying
    that it is made again, or with `remade=False` that reads go on without it)."""
    try:  # a derived file is its folder's own: a link out of it is not one tpufeed wrote
        fd = open_regular(path, root=os.path.dirname(os.path.abspath(path)))
    except SourceError as error:
        if not os.path.lexists(path):
            return None
        _discard(path, what, str(error), remade)
        return None
    try:
        identity = FileIdentity.of(os.fstat(fd))
        problem = _check(fd, path, identity)
    except OSError as error:
        problem = f"cannot be read ({error})"
    if problem is None:
        return Derived(fd, identity.size - _TRAILER.size, identity)
    os.close(fd)
    _discard(path, what, problem, remade)
    return None


def read_derived(path: str, what: str, remade: bool = True) -> bytes | None:
    """The payload of `path` (see `open_derived`), or None."""
    found = open_derived(path, what, remade)
    if found is None:
        return None
    try:
        data = os.pread(found.fd, found.size, 0)
    finally:
        os.close(found.fd)
    return data if len(data) == found.size else None


def remove_dead_temporaries(directory: str, recursive: bool = False) -> int:
    """Removes the temporary files in `directory` whose writers (on this host) are gone;
    returns how many. A writer that still runs keeps its file."""
    removed = 0
    for folder, names in _listings(directory, recursive):
        for name in names:
            if not dead_temporary(name):
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(folder, name))
                removed += 1
    return removed


def dead_temporary(name: str) -> bool:
    """Whether `name` is a temporary name (`temporary_name`) whose writer, on this host, is gone."""
    at = name.rfind(_TMP)
    return at >= 0 and not _alive(name[at + len(_TMP) :])


def remove_dead_temporaries_once(directory: str) -> int:
    """`remove_dead_temporaries(directory)` the first time this process asks for `directory`,
    0 after: for writers of many derived files into one folder (one listing, not one each)."""
    key = (os.getpid(), os.path.abspath(directory))
    with _verified_lock:
        if key in _swept:
            return 0
        _swept.add(key)
    return remove_dead_temporaries(directory)


def _listings(directory: str, recursive: bool) -> Iterator[tuple[str, list[str]]]:
    if recursive:
        for folder, _, names in os.walk(directory):
            yield folder, names
        return
    try:
        yield directory, os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return


def _check(fd: int, path: str, identity: FileIdentity) -> str | None:
    """What is wrong with the derived file open at `fd`, or None (checked once a process)."""
    if identity.size < _TRAILER.size:
        return f"is {identity.size} bytes, too short for its trailer"
    magic, length, crc = _TRAILER.unpack(os.pread(fd, _TRAILER.size, identity.size - _TRAILER.size))
    if magic != _MAGIC or length != identity.size - _TRAILER.size:
        return "has no whole trailer (it was cut, or not written by tpufeed)"
    with _verified_lock:
        if (path, identity) in _verified:
            return None
    found = 0
    for offset in range(0, length, _CHECK_CHUNK):
        chunk = os.pread(fd, min(_CHECK_CHUNK, length - offset), offset)
        found = google_crc32c.extend(found, chunk)
    if found != crc:
        return f"fails its CRC32C check ({found:08x}, written {crc:08x})"
    with _verified_lock:
        _verified.add((path, identity))
    return None


def _discard(path: str, what: str, problem: str, remade: bool = True) -> None:
    try:
        os.unlink(path)
        outcome = "removed; it is made again" if remade else "removed; reads go on without it"
    except OSError as error:
        outcome = (
            f"cannot be removed ({error}); it is made again in memory"
            if remade
            else f"cannot be removed ({error}); reads go on without it"
        )
    warnings.warn(f"{path}: {what} {problem}; {outcome}", stacklevel=3)


class _Checksummed:
    """A file that keeps the CRC32C and length of what is written through it."""

    def __init__(self, raw: BinaryIO):
        self.raw, self.crc, self.length = raw, 0, 0

    def write(self, data: Any) -> int:
        chunk = data if isinstance(data, bytes) else bytes(data)  # google_crc32c takes bytes
        self.crc = google_crc32c.extend(self.crc, chunk)
        self.length += len(chunk)
        return self.raw.write(chunk)

    def flush(self) -> None:
        self.raw.flush()

    def tell(self) -> int:
        return self.length

    def seekable(self) -> bool:
        return False


def _start_time(pid: int) -> str | None:
    """The start time of process `pid` in clock ticks since boot, or None if there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()[19].decode()


def _writer() -> str:
    """This process as a writer: host, pid and start time (worked out once per process)."""
    pid = os.getpid()
    if _writers.get(pid) is None:
        _writers[pid] = f"{socket.gethostname()}-{pid}-{_start_time(pid) or 0}"
    return _writers[pid]


def _alive(tail: str) -> bool:
    """Whether the writer named by a temporary's tail (host-pid-start-random) still runs; a
    writer on another host, or a name tpufeed did not make, counts as alive."""
    parts = tail.rsplit("-", 3)
    if len(parts) != 4 or parts[0] != socket.gethostname():
        return True
    _, pid, start, _ = parts
    if not pid.isdigit():
        return True
    return _start_time(int(pid)) == start
