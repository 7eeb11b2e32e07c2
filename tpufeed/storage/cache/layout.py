"""Where the shard cache keeps things, and the small file operations it is built from.

    shards/<key>.data      a whole object, checked against its size and CRC32C
    shards/<key>.part-*    a download in progress, already at its full size (so it counts)
    shards/<key>.lock      the entry's lock; its mtime says when a reader last used the entry
    shards/<key>.json      where the entry came from, and its stat stamp when last verified
    evicted/<key>.evicted-*  an evicted copy a reader still has open (see `cache_holds`)
    meta/<key>.facts       small facts about objects (an ArrayRecord shard's record count),
                           JSON as a derived file (`storage.derived`: CRC32C trailer)
    plans/<pid>-<n>.json   each running read-ahead's next uses, for other processes' evictions
    tmp/                   scratch files (ArrayRecord footer probes)
    tfrecord-index/        record indexes of gs:// TFRecord files
    .lock                  the global lock: held while space is counted and reserved

`<key>` names the object *and its generation*, so a replaced object is a different entry.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass
from typing import Any

import google_crc32c

from tpufeed.errors import SourceError
from tpufeed.storage.derived import temporary_name
from tpufeed.storage.objects import RemoteObject
from tpufeed.storage.opener import open_regular

__all__ = ["BOOT", "CACHE_DIR_ENV", "CacheLayout", "default_cache_dir", "entry_key", "key_of"]

CACHE_DIR_ENV = "TPUFEED_CACHE_DIR"


def default_cache_dir() -> str:
    """`$TPUFEED_CACHE_DIR`, else `~/.cache/tpufeed` (read at each call, not at import)."""
    return os.environ.get(CACHE_DIR_ENV) or os.path.join(
        os.path.expanduser("~"), ".cache", "tpufeed"
    )


@functools.lru_cache(maxsize=1 << 16)
def entry_key(obj: RemoteObject) -> str:
    digest = hashlib.blake2b(obj.identity.encode(), digest_size=12).hexdigest()
    base = re.sub(r"[^A-Za-z0-9._-]", "_", obj.name.rsplit("/", 1)[-1])[:60]
    return f"{digest}-{base}"


def key_of(name: str) -> str:
    """The entry key of a file name in shards/ (keys may hold dots: they end in a basename)."""
    for marker in (".part-", ".json.tmp-", ".evicted-"):
        if marker in name:
            return name.split(marker, 1)[0]
    for suffix in (".data", ".lock", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


# Verified stamps are trusted within one boot only: after a crash the page cache is gone and a
# renamed file may hold zeros where unwritten data was, so every file is re-checked once.
BOOT = _boot_id()


@dataclass(frozen=True)
class CacheLayout:
    """The paths under one cache directory."""

    root: str

    @property
    def shards(self) -> str:
        return os.path.join(self.root, "shards")

    @property
    def evicted(self) -> str:
        return os.path.join(self.root, "evicted")

    @property
    def plans(self) -> str:
        return os.path.join(self.root, "plans")

    def data(self, key: str) -> str:
        return os.path.join(self.shards, key + ".data")

    def lock(self, key: str) -> str:
        return os.path.join(self.shards, key + ".lock")

    def record(self, key: str) -> str:
        return os.path.join(self.shards, key + ".json")

    def meta(self, key: str) -> str:
        return os.path.join(self.root, "meta", key + ".facts")

    def make_dirs(self) -> None:
        for sub in ("shards", "evicted", "meta", "plans"):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)

    def open_lock(self, key: str) -> int:
        """An fd on the entry's lock file, created with mtime 0 (its mtime marks reads only)."""
        path = self.lock(key)
        try:
            return os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            pass
        self.make_dirs()
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            return os.open(path, os.O_RDWR | os.O_CLOEXEC)
        os.utime(fd, ns=(0, 0))
        return fd


def stamp(st: os.stat_result) -> list[int]:
    """What must not change for a verified file to stay trusted (any write changes the ctime)."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def remove(path: str) -> bool:
    try:
        os.remove(path)
        return True
    except FileNotFoundError:
        return False


def free_bytes(path: str) -> int:
    """Bytes free on the filesystem of `path`, or of its nearest existing parent."""
    while not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return shutil.disk_usage(path).free


def file_crc32c(path: str, links: bool = True) -> int:
    """The CRC32C of the regular file `path` (anything else is refused without blocking; with
    `links=False`, a symlink too)."""
    crc = 0
    with os.fdopen(open_regular(path, links=links), "rb", buffering=0) as f:
        while chunk := f.read(8 << 20):
            crc = google_crc32c.extend(crc, chunk)
    return crc


def read_json(path: str) -> dict[str, Any] | None:
    """The JSON object in `path`, or None if there is none (missing, damaged, or not a
    regular file: a FIFO or a link in its place is never opened for reading)."""
    try:
        with os.fdopen(open_regular(path, links=False), encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError, RecursionError, SourceError):
        return None
    return value if isinstance(value, dict) else None


def write_json(path: str, value: dict[str, Any]) -> None:
    """Writes `path` whole or not at all (temporary name, then rename). The temporary names
    its writer (`derived.temporary_name`), so a killed writer's is known and removed."""
    tmp = temporary_name(path)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(value, f)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
