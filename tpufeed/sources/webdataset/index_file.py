"""A shard's sample index kept on disk: a derived file of the tar (`tpufeed.storage.derived`).

It lives beside the shard (`<path>.wds.tpufeed-index`), or in an index folder (`index_dir`;
`default_index_dir()` when the shard's folder is read-only; `<cache dir>/tar-index` for an
object read from a store) under `derived_name`: the tar's path and whole identity. The index
names that identity inside too (a local tar's device, inode, size and mtime; an object's URL
and generation or ETag), so an index is never taken for a tar that replaced the one it was
made from, even one of the same size and mtime: the tar is scanned again and its index
replaced.

It is written atomically with a CRC32C trailer (`write_derived`) and checked on its first use
in each process (`read_derived`). One that fails the check, does not hold together, or is not
a regular file in its own folder (a FIFO, a link out) is removed with a warning and made again;
never trusted. Temporaries of writers that died (a SIGKILL mid-write) are removed when the
folder is first looked in.

The bytes: a head (`_HEAD`: magic, tar size, and the lengths of what follows), the identity,
the arrays of `TarIndex` (little-endian), then the keys' and fields' UTF-8 bytes.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import warnings
from typing import BinaryIO, NamedTuple

import numpy as np

from tpufeed.errors import CorruptDataError
from tpufeed.sources.tfrecord.index import default_index_dir
from tpufeed.sources.webdataset.index import TarIndex
from tpufeed.storage.bounded import declared, malformed, parsing
from tpufeed.storage.derived import (
    dead_temporary,
    derived_name,
    read_derived,
    remove_dead_temporaries,
    write_derived,
)
from tpufeed.storage.objects import RemoteObject
from tpufeed.storage.opener import FileIdentity

__all__ = [
    "INDEX_SUFFIX",
    "Place",
    "load_index",
    "local_places",
    "remote_identity",
    "remote_places",
    "save_index",
]

INDEX_SUFFIX = ".wds.tpufeed-index"  # contains ".tpufeed-index": globs of shards skip it
_MAGIC = b"TPFWDS\x00\x02"
_HEAD = struct.Struct("<8s7Q")  # magic; tar size; bytes of identity, samples, members, fields,
# key bytes, field bytes
_cleaned: set[str] = set()  # folders whose dead temporaries this process has removed
_cleaned_lock = threading.Lock()


class Place(NamedTuple):
    """Where an index may be: `beside` a shard, in the shard's own folder, or in a folder of
    indexes."""

    path: str
    beside: bool = False


def local_places(path: str, pin: FileIdentity, index_dir: str | os.PathLike | None) -> list[Place]:
    """Where the index of the local tar `path` (as pinned) is looked for, in order."""
    name = derived_name(path, pin, INDEX_SUFFIX)
    if index_dir is not None:
        return [Place(os.path.join(os.fspath(index_dir), name))]
    return [Place(path + INDEX_SUFFIX, True), Place(os.path.join(default_index_dir(), name))]


def remote_places(obj: RemoteObject, directory: str) -> list[Place]:
    """Where the index of one version of an object is kept."""
    return [Place(os.path.join(directory, derived_name(obj.url, obj.version, INDEX_SUFFIX)))]


def remote_identity(obj: RemoteObject) -> str:
    return f"{obj.url}#{obj.version}"


def load_index(
    places: list[Place], identity: str, size: int, shown: str
) -> tuple[str, TarIndex] | None:
    """(where, the index) of the tar `shown`, as it is now (`identity`, `size`), from the
    first of `places` that holds it whole; None if none does."""
    what = f"the tar index of {shown}"
    for place in places:
        _remove_dead_temporaries(place)
        payload = read_derived(place.path, what)
        if payload is None:
            continue
        try:
            index = _decode(payload, identity, size, place.path)
        except CorruptDataError as error:
            with contextlib.suppress(OSError):
                os.unlink(place.path)
            warnings.warn(f"{error}; {what} is removed, and made again", stacklevel=3)
            continue
        if index is not None:  # None: made from another tar once in this place (replaced)
            return place.path, index
    return None


def save_index(
    places: list[Place], identity: str, size: int, index: TarIndex, shown: str
) -> str | None:
    """Writes `index` to the first of `places` that takes it; where, or None (with a
    warning) if none does."""
    errors = []
    for place in places:
        try:
            os.makedirs(os.path.dirname(place.path) or ".", exist_ok=True)
            write_derived(place.path, lambda out: _write(out, index, identity, size))
            return place.path
        except OSError as error:
            errors.append(f"{place.path}: {error}")
    warnings.warn(
        f"{shown}: cannot cache its sample index ({'; '.join(errors)}); "
        "it will be rebuilt on every open",
        stacklevel=3,
    )
    return None


def _remove_dead_temporaries(place: Place) -> None:
    """Once a process per folder, the temporaries of writers that died: in an index folder
    all of them (`remove_dead_temporaries`), in a shard's folder those of tar indexes only."""
    folder = os.path.dirname(place.path) or "."
    with _cleaned_lock:
        if folder in _cleaned:
            return
        _cleaned.add(folder)
    if not place.beside:
        remove_dead_temporaries(folder)
        return
    with contextlib.suppress(OSError):
        for name in os.listdir(folder):
            if INDEX_SUFFIX + ".tmp-" in name and dead_temporary(name):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(folder, name))


def _write(out: BinaryIO, index: TarIndex, identity: str, size: int) -> None:
    keys = [k.encode("utf-8", "surrogateescape") for k in index.keys]
    fields = [f.encode("utf-8", "surrogateescape") for f in index.fields]
    name = identity.encode("utf-8", "surrogateescape")
    counts = (len(name), len(keys), index.offsets.size, len(fields))
    out.write(_HEAD.pack(_MAGIC, size, *counts, sum(map(len, keys)), sum(map(len, fields))))
    out.write(name)
    for array in [
        index.first.astype("<i8"),
        index.offsets.astype("<u8"),
        index.sizes.astype("<u8"),
        np.cumsum([len(k) for k in keys], dtype="<i8"),
        np.cumsum([len(f) for f in fields], dtype="<i8"),
        index.field_ids.astype("<i4"),
    ]:
        out.write(array.tobytes())
    out.write(b"".join(keys))
    out.write(b"".join(fields))


def _decode(payload: bytes, identity: str, size: int, place: str) -> TarIndex | None:
    """The index in `payload` if it was made from the tar `identity`; None if from another;
    raises `CorruptDataError` if it does not hold together."""
    with parsing(place, "the tar index"):
        if len(payload) < _HEAD.size or payload[:8] != _MAGIC:
            raise malformed(place, "the tar index", "its head is not a tar index's", 0)
        _, tar_size, *lengths = _HEAD.unpack_from(payload)
        name_bytes, samples, members, fields, key_bytes, field_bytes = lengths
        at = declared(name_bytes, len(payload) - _HEAD.size, place, "its identity", 8)
        if payload[_HEAD.size : _HEAD.size + at] != identity.encode("utf-8", "surrogateescape"):
            return None
        if tar_size != size:
            return None
        need = _HEAD.size + name_bytes + 8 * (2 * samples + 1 + fields) + 20 * members
        if need + key_bytes + field_bytes != len(payload):
            raise malformed(place, "the tar index", "its lengths do not add up to its size")
        reader = _Arrays(payload, _HEAD.size + name_bytes)
        first, offsets, sizes = (
            reader("<i8", samples + 1),
            reader("<u8", members),
            reader("<u8", members),
        )
        key_ends, field_ends = reader("<i8", samples), reader("<i8", fields)
        field_ids = reader("<i4", members)
        keys = reader.strings(key_ends, key_bytes)
        names = reader.strings(field_ends, field_bytes)
        index = TarIndex(
            keys,
            first.astype(np.int64),
            offsets.astype(np.uint64),
            sizes.astype(np.uint64),
            field_ids.astype(np.int32),
            names,
        )
        if not _consistent(index, size):
            raise malformed(place, "the tar index", "its members do not hold together")
        return index


class _Arrays:
    """Reads arrays then strings from `payload` one after another (lengths checked before)."""

    def __init__(self, payload: bytes, at: int):
        self.payload, self.at = payload, at

    def __call__(self, dtype: str, count: int) -> np.ndarray:
        array = np.frombuffer(self.payload, dtype, count, self.at)
        self.at += array.nbytes
        return array

    def strings(self, ends: np.ndarray, total: int) -> list[str]:
        if ends.size and (ends[-1] != total or np.any(np.diff(ends) < 0) or ends[0] < 0):
            raise ValueError("string ends out of order")
        if not ends.size and total:
            raise ValueError("string bytes with no strings")
        blob = self.payload[self.at : self.at + total]
        self.at += total
        starts = [0, *ends[:-1].tolist()]
        return [blob[s:e].decode("utf-8", "surrogateescape") for s, e in zip(starts, ends.tolist())]


def _consistent(index: TarIndex, size: int) -> bool:
    """Whether a loaded index holds together (a damaged one is made again instead)."""
    members = index.offsets.size
    first = index.first
    return bool(
        first.size == len(index.keys) + 1
        and first[0] == 0
        and first[-1] == members
        and np.all(np.diff(first) > 0)
        and (not members or index.field_ids.max() < len(index.fields))
        and (not members or index.field_ids.min() >= 0)
        and np.all(index.sizes <= np.uint64(size))
        and np.all(index.offsets <= np.uint64(size) - index.sizes)
    )
