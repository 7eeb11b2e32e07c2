"""A dataset built by the Beam stage: its `manifest.json`, and its shards as one verified source.

The manifest is the dataset's only entry point: shards not named in it are not part of the
dataset, and a folder without one (an interrupted build) does not open. It is JSON:

    {"format": "tpufeed-dataset", "format_version": 1, "tpufeed_version": "0.1.0",
     "file_format": "array_record" | "tfrecord", "record_format": "tpufeed.codec" | "bytes",
     "num_records": 10,
     "shards": [{"path": "data-00000-of-00002.array_record", "num_records": 5,
                 "num_bytes": 131072, "crc32c": "1a2b3c4d"}, ...],
     "schema": {"x": {"type": "ndarray", "dtype": "float32", "shape": [null, 3],
                      "ragged_dims": [0], "present": 10}, ...} | null,
     "statistics": {...}, "build": {...}}

Shard paths are relative to the manifest's folder and may not leave it: absolute paths, `..`
components and symlinks pointing outside are refused before any shard is opened.

>>> source = ManifestSource("gs-copy/my-dataset")  # doctest: +SKIP
>>> source.schema["image"]["dtype"], len(source), source[0]["label"]  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Sequence
from typing import Any

import google_crc32c
import numpy as np

from tpufeed import codec
from tpufeed.errors import CodecError, CorruptDataError, SourceError, SourceNotFoundError
from tpufeed.sources.sharded import RecordFile, ShardedSource

__all__ = ["FILE_EXTENSIONS", "FORMAT", "FORMAT_VERSION", "MANIFEST_NAME", "ManifestSource",
           "load_manifest", "safe_shard_path"]

MANIFEST_NAME = "manifest.json"
FORMAT = "tpufeed-dataset"
FORMAT_VERSION = 1
CODEC_RECORDS = "tpufeed.codec"
RAW_RECORDS = "bytes"
FILE_EXTENSIONS = {"array_record": ".array_record", "tfrecord": ".tfrecord"}
_MAX_MANIFEST_BYTES = 256 << 20
_CRC_CHUNK = 8 << 20
_CRC_RE = re.compile(r"[0-9a-f]{8}")


def file_crc32c(path: str) -> tuple[int, str]:
    """(size in bytes, CRC32C as 8 hex digits) of a local file, read in 8 MiB chunks."""
    crc, size = 0, 0
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(_CRC_CHUNK):
            crc = google_crc32c.extend(crc, chunk)
            size += len(chunk)
    return size, f"{crc:08x}"


def safe_shard_path(root: str, name: object, manifest_path: str) -> str:
    """The local path of shard `name` under `root`; raises if `name` could lead outside it."""
    def refuse(why: str) -> CorruptDataError:
        return CorruptDataError(f"{manifest_path}: shard path {name!r} {why}; shard paths must be "
                                f"relative paths inside the dataset root {root}",
                                path=manifest_path)

    if not isinstance(name, str) or not name:
        raise refuse("is not a non-empty string")
    if "\0" in name or "\\" in name:
        raise refuse("contains a NUL byte or a backslash")
    if name.startswith("/") or os.path.isabs(name) or re.match(r"[A-Za-z]:", name) or "://" in name:
        raise refuse("is absolute and escapes the dataset root")
    if any(part in ("..", "") for part in name.split("/")):
        raise refuse("has a '..' or empty component and escapes the dataset root")
    path = os.path.join(root, name)
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        raise refuse(f"resolves through a symlink to {real}, outside the dataset root")
    return path


def load_manifest(path: str | os.PathLike) -> tuple[str, str, dict[str, Any]]:
    """(manifest path, dataset root, checked manifest) for a dataset folder or its manifest."""
    path = os.fspath(path)
    if "://" in path:
        raise SourceNotFoundError(
            f"{path}: remote datasets are read through the GCS shard cache, which this version "
            "of tpufeed does not include yet; copy the dataset folder to local disk", path=path)
    manifest_path = os.path.join(path, MANIFEST_NAME) if os.path.isdir(path) else path
    try:
        with open(manifest_path, "rb") as f:
            data = f.read(_MAX_MANIFEST_BYTES + 1)
    except FileNotFoundError:
        hint = (" (the folder has no manifest: the build did not finish, or this is not a "
                "dataset built by `tpufeed build`)" if os.path.isdir(path) else "")
        raise SourceNotFoundError(f"no such file: {manifest_path}{hint}",
                                  path=manifest_path) from None
    except OSError as e:
        raise SourceError(f"{manifest_path}: cannot read: {e}", path=manifest_path) from e
    if len(data) > _MAX_MANIFEST_BYTES:
        raise CorruptDataError(f"{manifest_path}: larger than {_MAX_MANIFEST_BYTES:,} bytes; "
                               "not a tpufeed manifest", path=manifest_path)
    try:
        manifest = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptDataError(f"{manifest_path}: not valid JSON: {e}", path=manifest_path) from e
    check_manifest(manifest, manifest_path)
    return manifest_path, os.path.dirname(os.path.abspath(manifest_path)), manifest


def check_manifest(manifest: object, where: str) -> None:
    """Raises CorruptDataError naming `where` and the field if `manifest` is malformed."""
    def bad(field: str, why: str) -> CorruptDataError:
        return CorruptDataError(f"{where}: manifest field {field} {why}", path=where)

    if not isinstance(manifest, dict):
        raise CorruptDataError(f"{where}: a manifest is a JSON object, got "
                               f"{type(manifest).__name__}", path=where)
    if manifest.get("format") != FORMAT:
        raise bad("'format'", f"is {manifest.get('format')!r}, expected {FORMAT!r}")
    version = manifest.get("format_version")
    if not _is_count(version) or not 1 <= version <= FORMAT_VERSION:
        raise bad("'format_version'", f"is {version!r}; this tpufeed reads versions 1 to "
                  f"{FORMAT_VERSION} (a newer tpufeed wrote it?)")
    if manifest.get("file_format") not in FILE_EXTENSIONS:
        raise bad("'file_format'", f"is {manifest.get('file_format')!r}, expected one of "
                  f"{sorted(FILE_EXTENSIONS)}")
    if manifest.get("record_format") not in (CODEC_RECORDS, RAW_RECORDS):
        raise bad("'record_format'", f"is {manifest.get('record_format')!r}, expected "
                  f"{CODEC_RECORDS!r} or {RAW_RECORDS!r}")
    shards = manifest.get("shards")
    if not isinstance(shards, list) or not shards:
        raise bad("'shards'", "must be a non-empty list")
    for i, shard in enumerate(shards):
        if not isinstance(shard, dict):
            raise bad(f"shards[{i}]", "must be an object")
        for key in ("num_records", "num_bytes"):
            if not _is_count(shard.get(key)):
                raise bad(f"shards[{i}].{key}", f"is {shard.get(key)!r}, not a count")
        if not isinstance(shard.get("crc32c"), str) or not _CRC_RE.fullmatch(shard["crc32c"]):
            raise bad(f"shards[{i}].crc32c", f"is {shard.get('crc32c')!r}, not 8 hex digits")
    names = [shard.get("path") for shard in shards]
    if len(set(map(str, names))) != len(names):
        raise bad("'shards'", "names the same path twice")
    total = sum(shard["num_records"] for shard in shards)
    if manifest.get("num_records") != total:
        raise bad("'num_records'", f"is {manifest.get('num_records')!r} but the shards hold {total}")


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class VerifiedShard:
    """A shard file that checks its size, CRC32C and record count against the manifest once.

    `len()` is the manifest's count and opens nothing; the first `read` (or `verify`) checks the
    file, then opens the reader. Picklable: a copy remembers whether the file was verified.
    """

    def __init__(self, path: str, entry: dict[str, Any], file_format: str):
        self.path = path
        self.num_records: int = entry["num_records"]
        self.num_bytes: int = entry["num_bytes"]
        self.crc32c: str = entry["crc32c"]
        self.file_format = file_format
        self.verified = False
        self._file: RecordFile | None = None
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.num_records

    def verify(self) -> None:
        """Checks size and CRC32C of the whole file against the manifest (once)."""
        with self._lock:
            self._verify_locked()

    def _verify_locked(self) -> None:
        if self.verified:
            return
        try:
            size, crc = file_crc32c(self.path)
        except FileNotFoundError:
            raise SourceNotFoundError(f"{self.path}: shard named in the manifest is missing",
                                      path=self.path) from None
        except OSError as e:
            raise SourceError(f"{self.path}: cannot read: {e}", path=self.path) from e
        if size != self.num_bytes:
            raise CorruptDataError(f"{self.path}: shard is {size:,} bytes, the manifest says "
                                   f"{self.num_bytes:,} (truncated or replaced?)", path=self.path)
        if crc != self.crc32c:
            raise CorruptDataError(f"{self.path}: CRC32C is {crc}, the manifest says "
                                   f"{self.crc32c}: the shard is corrupted", path=self.path)
        self.verified = True

    def _open(self) -> RecordFile:
        with self._lock:
            if self._file is None:
                self._verify_locked()
                if self.file_format == "array_record":
                    from tpufeed.sources.array_record import ArrayRecordFile
                    opened: RecordFile = ArrayRecordFile(self.path)
                else:
                    from tpufeed.sources.tfrecord import TFRecordFile
                    opened = TFRecordFile(self.path)
                if len(opened) != self.num_records:
                    raise CorruptDataError(f"{self.path}: shard holds {len(opened)} records, the "
                                           f"manifest says {self.num_records}", path=self.path)
                self._file = opened
            return self._file

    def read(self, indices: np.ndarray) -> list[bytes]:
        return (self._file if self._file is not None else self._open()).read(indices)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_file"] = None
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"VerifiedShard({self.path!r}, {self.num_records} records, verified={self.verified})"


class ManifestSource(ShardedSource):
    """The records of a built dataset (a folder or its manifest.json), decoded when they are
    tpufeed.codec dicts; each shard is checked against the manifest on its first read, or all
    at once here with `verify=True`."""

    def __init__(self, path: str | os.PathLike, verify: bool = False):
        self.manifest_path, self.root, self.manifest = load_manifest(path)
        file_format = self.manifest["file_format"]
        super().__init__([
            VerifiedShard(safe_shard_path(self.root, entry["path"], self.manifest_path), entry,
                          file_format)
            for entry in self.manifest["shards"]])
        self._decode = self.manifest["record_format"] == CODEC_RECORDS
        if verify:
            self.verify()

    @property
    def schema(self) -> dict[str, Any] | None:
        """Per key: type, dtype, shape (null where it varies), ragged dims; None for raw bytes."""
        return self.manifest.get("schema")

    @property
    def statistics(self) -> dict[str, Any]:
        return self.manifest.get("statistics") or {}

    def verify(self) -> None:
        """Checks every shard's size and CRC32C now (each file is read once, in full)."""
        for shard in self.files:
            shard.verify()

    def __getitem__(self, index: int) -> Any:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[Any]:
        records = super().__getitems__(indices)
        if not self._decode:
            return records
        out = []
        for i, record in enumerate(records):
            try:
                out.append(codec.decode(record))
            except CodecError as e:
                index = int(np.asarray(indices).reshape(-1)[i])
                path, local = self.locate(index)
                raise CorruptDataError(f"{path} record {local} (global record {index}): not a "
                                       f"tpufeed.codec record: {e}", path=path, record=local) from e
        return out

    def fingerprint(self) -> str:
        shards = ",".join(f"{os.path.basename(f.path)}:{len(f)}:{f.crc32c}" for f in self.files)
        return f"ManifestSource[{shards}]"

    def __repr__(self) -> str:
        return (f"ManifestSource({self.manifest_path!r}, {len(self.files)} "
                f"{self.manifest['file_format']} shards, {len(self)} records)")
