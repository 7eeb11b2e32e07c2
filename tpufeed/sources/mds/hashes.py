"""The hashes an MDS index lists for a file, checked over the file's bytes.

One listed algorithm is checked, the fastest that this Python computes (`xxh3_64`, `xxh64`,
`xxh128`, `xxh3_128`, `xxh32` through xxhash, then `md5`, `sha1`, `sha256` and the rest of
hashlib): each detects damage alike. A file whose listed hashes none of these computes is read
unchecked, with one warning. Bytes are read from the descriptor that was opened and pinned
(`descriptor_chunks`), never from the path again, so the bytes checked are the bytes read.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from tpufeed.errors import CorruptDataError

__all__ = ["ExpectedHash", "checked_hash", "descriptor_chunks"]

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


class ExpectedHash:
    """One of the `hashes` an index lists for a file (`shown`), computed over the bytes given to
    `update` and compared by `check`; with none this Python computes, it checks nothing."""

    def __init__(self, hashes: dict[str, str], shown: str):
        self.shown = shown
        self.name: str | None = None
        self._expected = ""
        self._digest: Any = None
        names = sorted(hashes, key=lambda n: _PREFERRED.index(n) if n in _PREFERRED else 99)
        for name in names:
            make = _hasher(name)
            if make is not None:
                self.name, self._expected, self._digest = name, hashes[name], make()
                return
        if names and not _warned.intersection(names):
            _warned.update(names)
            warnings.warn(
                f"{shown}: none of its hashes {names} can be computed here (xxh*: pip install "
                "xxhash), so it is read unchecked",
                stacklevel=4,
            )

    def update(self, chunk: bytes) -> None:
        if self._digest is not None:
            self._digest.update(chunk)

    def check(self) -> str | None:
        """The algorithm checked (None if none was); raises if the bytes do not match."""
        if self._digest is None:
            return None
        found = self._digest.hexdigest()
        if found != self._expected:
            raise CorruptDataError(
                f"{self.shown}: its {self.name} is {found}, the index says {self._expected} "
                "(the shard is damaged, or was replaced after the index was written)",
                path=self.shown,
            )
        return self.name


def checked_hash(
    hashes: dict[str, str], read: Callable[[], Iterable[bytes]], shown: str
) -> str | None:
    """Checks the bytes `read()` yields (chunks) against one of `hashes`; returns the algorithm
    used, or None when there is no hash or none this Python computes (nothing is read then)."""
    expected = ExpectedHash(hashes, shown)
    if expected.name is not None:
        for chunk in read():
            expected.update(chunk)
    return expected.check()


def descriptor_chunks(fd: int, size: int) -> Callable[[], Iterator[bytes]]:
    """The first `size` bytes of the file open at `fd`, in chunks read by offset; a file that
    ends sooner yields what it has (its hash then differs)."""

    def chunks() -> Iterator[bytes]:
        for offset in range(0, size, _CHUNK):
            chunk = os.pread(fd, min(_CHUNK, size - offset), offset)
            if not chunk:
                return
            yield chunk

    return chunks
