"""The sample index of a WebDataset tar shard: its members' offsets, grouped as WebDataset groups.

One pass over the tar's headers (`headers.walk_tar`: the members Python's `tarfile`, WebDataset's
own reader, finds, read within bounds) finds every regular member's data offset and size
without reading the data. Members are grouped as `webdataset.tariterators` groups them:

- only regular files count; `__name__` at the top level and names matching `__...__` or
  `__...__/...` (WebDataset's metadata) are skipped, as is a name with no '.' in its last part;
- a name splits at the first '.' of its last part (`base_plus_ext`): `dir.v1/a.seg.jpg` is
  key `dir.v1/a`, field `seg.jpg`; the field is lowercased;
- consecutive members with one key make a sample (`__key__`); a key seen again later starts
  another sample; a field twice in one sample is an error, as in WebDataset.

The index is kept on disk as a derived file of the tar (`index_file`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tpufeed.errors import CorruptDataError
from tpufeed.sources.webdataset.headers import REGULAR, Member, walk_tar

__all__ = ["LOCAL_WINDOW", "REMOTE_WINDOW", "TarIndex", "scan_tar"]

_META = re.compile(r"__[^/]*__($|/)")  # webdataset.tariterators.tar_file_iterator's skip_meta
_BASE_PLUS_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # tariterators.base_plus_ext
_COMPRESSED = (
    (b"\x1f\x8b", "gzip", "gunzip"),
    (b"BZh", "bzip2", "bunzip2"),
    (b"\xfd7zXZ\x00", "xz", "unxz"),
    (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"),
)
LOCAL_WINDOW = 64 << 10
REMOTE_WINDOW = 1 << 20


@dataclass(frozen=True)
class TarIndex:
    """Sample `i` is members `first[i]` to `first[i + 1]`; member `m`'s data is
    `sizes[m]` bytes at `offsets[m]`, its field `fields[field_ids[m]]`."""

    keys: list[str]
    first: np.ndarray  # int64, one more than samples
    offsets: np.ndarray  # uint64
    sizes: np.ndarray  # uint64
    field_ids: np.ndarray  # int32
    fields: list[str]

    def __len__(self) -> int:
        return len(self.keys)


def _split_name(name: str) -> tuple[str, str] | None:
    """(key, field) of a member WebDataset keeps, or None for one it skips."""
    if "/" not in name and name.startswith("__") and name.endswith("__"):
        return None
    if _META.match(name):
        return None
    match = _BASE_PLUS_EXT.match(name)
    return None if match is None else (match.group(1), match.group(2).lower())


def scan_tar(
    read: Callable[[int, int], bytes], path: str, size: int, window: int = REMOTE_WINDOW
) -> TarIndex:
    """The index of the tar of `size` bytes that `read(offset, length)` reads, named `path`
    in errors. Headers are read `window` bytes at a time: one ranged GET of 1 MiB serves the
    headers of many small members of an object read in place."""
    windowed = _Window(read, size, window)
    _refuse_compressed(windowed(0, min(8, size)), path)
    grouping = _Grouping(path)
    for member in walk_tar(windowed, path, size):
        grouping.add(member)
    return grouping.index()


class _Window:
    """`read` through a window of `width` bytes: headers close together cost one read."""

    def __init__(self, read: Callable[[int, int], bytes], size: int, width: int):
        self.read, self.size, self.width = read, size, width
        self.start, self.data = 0, b""

    def __call__(self, offset: int, length: int) -> bytes:
        at = offset - self.start
        if at < 0 or at + length > len(self.data):
            self.start = offset
            self.data = self.read(offset, min(max(length, self.width), self.size - offset))
            at = 0
        return self.data[at : at + length]


class _Grouping:
    """Members into samples, as `webdataset.tariterators.group_by_keys` groups them."""

    def __init__(self, path: str):
        self.path = path
        self.keys: list[str] = []
        self.first: list[int] = []
        self.offsets: list[int] = []
        self.sizes: list[int] = []
        self.field_ids: list[int] = []
        self.fields: dict[str, int] = {}
        self.seen: set[str] = set()

    def add(self, member: Member) -> None:
        parts = _split_name(member.name) if member.type in REGULAR else None
        if parts is None:
            return
        key, field = parts
        if not self.keys or key != self.keys[-1]:
            self.keys.append(key)
            self.first.append(len(self.offsets))
            self.seen = set()
        if field in self.seen:
            raise CorruptDataError(
                f"{self.path}: member {member.name!r} repeats field {field!r} of sample {key!r} "
                "(WebDataset refuses this shard too: a duplicate file name in the tar)",
                path=self.path,
            )
        self.seen.add(field)
        self.offsets.append(member.data)
        self.sizes.append(member.size)
        self.field_ids.append(self.fields.setdefault(field, len(self.fields)))

    def index(self) -> TarIndex:
        return TarIndex(
            self.keys,
            np.array(self.first + [len(self.offsets)], np.int64),
            np.array(self.offsets, np.uint64),
            np.array(self.sizes, np.uint64),
            np.array(self.field_ids, np.int32),
            list(self.fields),
        )


def _refuse_compressed(head: bytes, path: str) -> None:
    for magic, kind, tool in _COMPRESSED:
        if head.startswith(magic):
            raise CorruptDataError(
                f"{path} is a {kind}-compressed tar: its members cannot be read by offset, so "
                f"tpufeed reads .tar shards, and gzip ones (.tgz) through a decompressed copy; "
                f"decompress it first ({tool} {os.path.basename(path)}), which keeps "
                "WebDataset able to read it",
                path=path,
            )
