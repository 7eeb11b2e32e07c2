"""The offset index of a TFRecord file, kept in a file of its own (`<path>.tpufeed-index`, or
under `default_index_dir()`), and checked against the data file's size and mtime (a gs://
object's generation) before it is trusted.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np

from tpufeed.sources.tfrecord.framing import _CRC, _HEADER, UNFRAMED

__all__ = ["INDEX_SUFFIX", "cached_index_name", "default_index_dir", "index_array", "load_index"]

INDEX_SUFFIX = ".tpufeed-index"
# Index file: one uint64 array [magic, version, size, mtime_ns, n, offsets[n], lengths[n]];
# version 2: a last length of UNFRAMED stands for the unframeable rest of a damaged file.
_INDEX_MAGIC = int.from_bytes(b"TPFIDX\x00\x00", "little")
_INDEX_VERSION = 2
_INDEX_FIELDS = 5
_U64 = (1 << 64) - 1


def default_index_dir() -> str:
    """Where indexes go when the data file's directory is not writable.

    `$TPUFEED_CACHE_DIR/tfrecord-index` if that variable is set, else
    `~/.cache/tpufeed/tfrecord-index`; read at each call, not at import.
    """
    root = os.environ.get("TPUFEED_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "tpufeed"
    )
    return os.path.join(root, "tfrecord-index")


def cached_index_name(path: str) -> str:
    absolute = os.path.abspath(path)
    digest = hashlib.sha256(absolute.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return f"{digest}-{os.path.basename(absolute)[:100]}{INDEX_SUFFIX}"


def index_array(size: int, mtime_ns: int, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    head = np.array(
        [_INDEX_MAGIC, _INDEX_VERSION, size, mtime_ns & _U64, offsets.size], dtype=np.uint64
    )
    return np.concatenate([head, offsets, lengths])


def load_index(index_path: str, size: int, mtime_ns: int) -> tuple[np.ndarray, np.ndarray] | None:
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
    offsets = arr[_INDEX_FIELDS : _INDEX_FIELDS + n]
    lengths = arr[_INDEX_FIELDS + n :]
    # Records tile the file exactly (up to an unframeable rest); a damaged index fails this
    # check and is rebuilt.
    framed = n - 1 if n and int(lengths[-1]) == UNFRAMED else n
    ends = offsets[:framed] + lengths[:framed] + np.uint64(_CRC.size)
    starts = np.concatenate([np.zeros(1, np.uint64), ends])[:n] + np.uint64(_HEADER.size)
    end = int(ends[-1]) if framed else 0
    if not np.array_equal(offsets, starts) or (end != size if framed == n else end >= size):
        return None
    return offsets.copy(), lengths.copy()
