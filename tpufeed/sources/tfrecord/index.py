"""The offset index of a TFRecord file: a derived file (`tpufeed.storage.derived`), kept beside
the data file (`<path>.tpufeed-index`) or under `default_index_dir()`.

An index holds the identity of the file it was made from (a local file's device, inode, size
and modification time; a gs:// or s3:// object's URL and version) and is used only for that
file: a file replaced by another, even one of the same size and time, is indexed again. Under
an index directory its name is keyed by that identity too (`derived_name`). It is written
atomically with a CRC32C trailer, checked on its first use in each process; a damaged one (or
anything that is not a regular file in its place) is removed with a warning and made again.

Payload: a 48-byte head (magic, version, SHA-256 of the identity, record count n), then n
uint64 data offsets and n uint64 lengths, little-endian; a last length of `UNFRAMED` stands
for the unframeable rest of a damaged file.
"""

from __future__ import annotations

import hashlib
import os
import struct
from typing import BinaryIO

import numpy as np

from tpufeed.sources.tfrecord.framing import _CRC, _HEADER, UNFRAMED
from tpufeed.storage.derived import (
    derived_name,
    read_derived,
    remove_dead_temporaries_once,
    write_derived,
)
from tpufeed.storage.opener import FileIdentity

__all__ = [
    "INDEX_SUFFIX",
    "cached_index_name",
    "default_index_dir",
    "index_name",
    "index_stamp",
    "load_index",
    "save_index",
]

INDEX_SUFFIX = ".tpufeed-index"
_HEAD = struct.Struct("<8s32sQ")  # magic (version in its last byte), identity digest, count
_MAGIC = b"TPFIDX\x00\x03"
_LE_U64 = np.dtype("<u8")


def default_index_dir() -> str:
    """Where indexes go when the data file's directory is not writable.

    `$TPUFEED_CACHE_DIR/tfrecord-index` if that variable is set, else
    `~/.cache/tpufeed/tfrecord-index`; read at each call, not at import.
    """
    root = os.environ.get("TPUFEED_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "tpufeed"
    )
    return os.path.join(root, "tfrecord-index")


def index_name(source: str, version: FileIdentity | str | int) -> str:
    """The name of `source`'s index in an index directory, keyed by its whole identity."""
    return derived_name(source, version, INDEX_SUFFIX)


def cached_index_name(path: str) -> str:
    """A name keyed by `path` alone (what the tar index of `sources.webdataset` still uses)."""
    absolute = os.path.abspath(path)
    digest = hashlib.sha256(absolute.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return f"{digest}-{os.path.basename(absolute)[:100]}{INDEX_SUFFIX}"


def index_stamp(source: str, version: FileIdentity | str | int) -> bytes:
    """What an index records of the file it was made from: a local file's identity (its path
    aside: a folder moved with its files keeps its indexes), or an object's URL and version."""
    if isinstance(version, FileIdentity):
        text = version.key()
    else:
        text = f"{source}#{version}"
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).digest()


def save_index(index_path: str, stamp: bytes, offsets: np.ndarray, lengths: np.ndarray) -> None:
    """Writes the index of the file `stamp` names (atomically; an `OSError` leaves nothing)."""

    def write(out: BinaryIO) -> None:
        out.write(_HEAD.pack(_MAGIC, stamp, offsets.size))
        out.write(offsets.astype(_LE_U64, copy=False).tobytes())
        out.write(lengths.astype(_LE_U64, copy=False).tobytes())

    remove_dead_temporaries_once(os.path.dirname(index_path) or ".")  # a killed writer's
    write_derived(index_path, write)


def load_index(
    index_path: str, stamp: bytes, size: int, what: str
) -> tuple[np.ndarray, np.ndarray] | None:
    """(offsets, lengths) from `index_path` if it is whole, made from the file `stamp` names,
    and tiles that file's `size` bytes; None otherwise (the caller indexes the file again).
    `what` names the index in the warning for a damaged one."""
    data = read_derived(index_path, what)
    if data is None or len(data) < _HEAD.size:
        return None
    magic, made_from, n = _HEAD.unpack_from(data)
    if magic != _MAGIC or made_from != stamp or len(data) != _HEAD.size + 16 * n:
        return None  # an older index, or one of another file: made again
    table = np.frombuffer(data, _LE_U64, 2 * n, _HEAD.size).astype(np.uint64)
    offsets, lengths = table[:n], table[n:]
    return (offsets, lengths) if _tiles(offsets, lengths, size) else None


def _tiles(offsets: np.ndarray, lengths: np.ndarray, size: int) -> bool:
    """Whether the records tile the file exactly (up to an unframeable rest)."""
    n = offsets.size
    framed = n - 1 if n and int(lengths[-1]) == UNFRAMED else n
    with np.errstate(over="ignore"):
        ends = offsets[:framed] + lengths[:framed] + np.uint64(_CRC.size)
    starts = np.concatenate([np.zeros(1, np.uint64), ends])[:n] + np.uint64(_HEADER.size)
    end = int(ends[-1]) if framed else 0
    if framed and (lengths[:framed] > np.uint64(size)).any():  # an end that wrapped around
        return False
    return bool(np.array_equal(offsets, starts)) and (end == size if framed == n else end < size)
