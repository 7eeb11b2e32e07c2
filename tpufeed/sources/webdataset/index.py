"""The sample index of a WebDataset tar shard: its members' offsets, grouped as WebDataset groups.

One pass over the tar's headers (Python's `tarfile`, the parser WebDataset itself reads with:
POSIX ustar, GNU long names, pax headers) finds every regular member's data offset and size
without reading the data. Members are grouped as `webdataset.tariterators` groups them:

- only regular files count; `__name__` at the top level and names matching `__...__` or
  `__...__/...` (WebDataset's metadata) are skipped, as is a name with no '.' in its last part;
- a name splits at the first '.' of its last part (`base_plus_ext`): `dir.v1/a.seg.jpg` is
  key `dir.v1/a`, field `seg.jpg`; the field is lowercased;
- consecutive members with one key make a sample (`__key__`); a key seen again later starts
  another sample; a field twice in one sample is an error, as in WebDataset.

The index is cached like the TFRecord index (`<path>.wds.tpufeed-index`, else under
`default_index_dir()`) and trusted only while the file's size and mtime (a gs:// object's
generation) match.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from tpufeed.errors import CorruptDataError

__all__ = ["INDEX_SUFFIX", "TarIndex", "load_tar_index", "save_tar_index", "scan_tar"]

INDEX_SUFFIX = ".wds.tpufeed-index"  # contains ".tpufeed-index": globs of shards skip it
_MAGIC = int.from_bytes(b"TPFTAR\x00\x00", "little")
_VERSION = 1
_U64 = (1 << 64) - 1
_BLOCK = 512
_META = re.compile(r"__[^/]*__($|/)")  # webdataset.tariterators.tar_file_iterator's skip_meta
_BASE_PLUS_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # tariterators.base_plus_ext
_COMPRESSED = (
    (b"\x1f\x8b", "gzip", "gunzip"),
    (b"BZh", "bzip2", "bunzip2"),
    (b"\xfd7zXZ\x00", "xz", "unxz"),
    (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"),
)


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


def scan_tar(f: BinaryIO, path: str, size: int) -> TarIndex:
    """The index of the tar `f` (`size` bytes), named `path` in errors."""
    _refuse_compressed(f, path)
    f.seek(0)
    try:
        tar = tarfile.TarFile(fileobj=f, mode="r")  # reads the first header
    except tarfile.TarError as e:
        raise CorruptDataError(f"{path}: not a tar file ({e})", path=path) from None
    grouping = _Grouping(path)
    last = "(the first member)"
    while True:
        try:
            member = tar.next()
        except tarfile.TarError as e:
            raise _broken(path, last, tar.offset, size, str(e)) from None
        tar.members = []  # type: ignore[attr-defined]  # tarfile keeps every member: drop them
        if member is None:
            break
        last = member.name
        if member.offset_data + member.size > size:
            raise _broken(path, member.name, member.offset_data, size, "its data is cut off")
        grouping.add(member)
    _check_end(f, path, last, tar.offset, size)
    return grouping.index()


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

    def add(self, member: tarfile.TarInfo) -> None:
        if member.issparse():
            raise CorruptDataError(
                f"{self.path}: member {member.name!r} is a GNU sparse file, which WebDataset "
                "shards do not hold; rewrite the shard with webdataset.TarWriter",
                path=self.path,
            )
        parts = _split_name(member.name) if member.isreg() else None
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
        self.offsets.append(member.offset_data)
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


def _refuse_compressed(f: BinaryIO, path: str) -> None:
    f.seek(0)
    head = f.read(8)
    for magic, kind, tool in _COMPRESSED:
        if head.startswith(magic):
            raise CorruptDataError(
                f"{path} is a {kind}-compressed tar: its members cannot be read by offset, so "
                f"tpufeed reads uncompressed .tar shards only; decompress it first ({tool} "
                f"{os.path.basename(path)}), which keeps WebDataset able to read it",
                path=path,
            )


def _check_end(f: BinaryIO, path: str, last: str, offset: int, size: int) -> None:
    """Where tarfile stopped must be the archive's end (zero blocks or the end of the file):
    tarfile ends quietly at a damaged header after the first."""
    f.seek(offset)
    rest = f.read(_BLOCK)
    if rest.strip(b"\0"):
        what = "a damaged header" if len(rest) == _BLOCK else "a header cut off by the file's end"
        raise _broken(path, last, offset, size, f"{what} follows it")


def _broken(path: str, member: str, offset: int, size: int, cause: str) -> CorruptDataError:
    return CorruptDataError(
        f"{path}: the tar is truncated or damaged after member {member!r} (at byte "
        f"{offset:,} of {size:,}): {cause}. Rewrite or re-download the shard",
        path=path,
    )


def save_tar_index(
    write: Callable[[str, Callable[[BinaryIO], object]], None],
    index_path: str,
    size: int,
    version: int,
    index: TarIndex,
) -> None:
    """Writes `index` to `index_path` through `write(path, fn)` (an atomic writer)."""
    arrays: dict[str, Any] = {
        "head": np.array([_MAGIC, _VERSION, size, version & _U64], np.uint64),
        "first": index.first,
        "offsets": index.offsets,
        "sizes": index.sizes,
        "field_ids": index.field_ids,
        **_strings("keys", index.keys),
        **_strings("fields", index.fields),
    }
    write(index_path, lambda out: np.savez(out, **arrays))


def _strings(name: str, values: list[str]) -> dict[str, np.ndarray]:
    encoded = [v.encode("utf-8", "surrogateescape") for v in values]
    ends = np.cumsum([len(e) for e in encoded], dtype=np.int64)
    return {name: np.frombuffer(b"".join(encoded), np.uint8), f"{name}_ends": ends}


def _unstrings(blob: np.ndarray, ends: np.ndarray) -> list[str]:
    data = blob.tobytes()
    starts = [0] + ends[:-1].tolist()
    return [data[s:e].decode("utf-8", "surrogateescape") for s, e in zip(starts, ends.tolist())]


def load_tar_index(index_path: str, size: int, version: int) -> TarIndex | None:
    """The index in `index_path` if it is whole and made for this size and version."""
    try:
        with open(index_path, "rb") as f, np.load(io.BytesIO(f.read()), allow_pickle=False) as z:
            arrays = {name: z[name] for name in z.files}
        head = arrays["head"]
        if head.dtype != np.uint64 or head.tolist() != [_MAGIC, _VERSION, size, version & _U64]:
            return None
        index = TarIndex(
            _unstrings(arrays["keys"], arrays["keys_ends"]),
            arrays["first"],
            arrays["offsets"],
            arrays["sizes"],
            arrays["field_ids"],
            _unstrings(arrays["fields"], arrays["fields_ends"]),
        )
    except (OSError, ValueError, KeyError, EOFError, UnicodeDecodeError, zipfile.BadZipFile):
        return None
    return index if _consistent(index, size) else None


def _consistent(index: TarIndex, size: int) -> bool:
    """Whether a loaded index holds together (a damaged one is rebuilt instead)."""
    members = index.offsets.size
    first = index.first
    return bool(
        first.dtype == np.int64
        and first.size == len(index.keys) + 1
        and first[0] == 0
        and first[-1] == members
        and np.all(np.diff(first) > 0)
        and index.sizes.size == members
        and index.field_ids.size == members
        and (not members or index.field_ids.max() < len(index.fields))
        and (not members or index.field_ids.min() >= 0)
        and np.all(index.offsets + index.sizes <= np.uint64(size))
    )
