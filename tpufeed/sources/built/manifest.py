"""A dataset built by the Beam stage: its `manifest.json`, and its shards as one verified source.

The manifest is the dataset's only entry point: shards not named in it are not part of the
dataset, and a folder without one (an interrupted build) does not open. It is JSON:

    {"format": "tpufeed-dataset", "format_version": 1, "tpufeed_version": "0.1.0",
     "file_format": "array_record" | "tfrecord",
     "record_format": "tpufeed.codec" | "tf.train.Example" | "bytes",
     "num_records": 10,
     "shards": [{"path": "data-00000-of-00002.array_record", "num_records": 5,
                 "num_bytes": 131072, "crc32c": "1a2b3c4d"}, ...],
     "schema": {"x": {"type": "ndarray", "dtype": "float32", "shape": [null, 3],
                      "ragged_dims": [0], "present": 10}, ...} | null,
     "statistics": {...}, "build": {...}}

(`tpufeed.sources.built.statistics` describes "statistics" and reads them.)

File formats (reader, extension, how counts are checked) come from `tpufeed.sources.formats`,
record formats (how a record decodes) from `tpufeed.sources.built.record_formats`. Shard paths are
relative to the manifest's folder and may not leave it: absolute paths, `..`
and empty components, URLs, and (locally) symlinks pointing outside are refused before any
shard is opened.

A dataset on GCS opens the same way, by its gs:// folder (or a `.json` manifest in it). The
manifest is fetched with tpufeed's GCS client, and one listing of the folder fixes each shard's
object version (a shard the manifest names but the folder lacks fails then). Shards are read
through the local shard cache (`tpufeed.storage.cache.shard_cache`), fetched ahead in plan order. Each is
checked by its object metadata, size and CRC32C (every download is checked against them, so
this check downloads nothing), and by its record count when it is opened.

>>> source = ManifestSource("gs://bucket/my-dataset")  # doctest: +SKIP
>>> source.schema["image"]["dtype"], len(source), source[0]["label"]  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import Any

import google_crc32c
import numpy as np

from tpufeed.errors import (
    CodecError,
    CorruptDataError,
    InvalidArgumentError,
    SourceError,
    SourceNotFoundError,
)
from tpufeed.sources.built.fields import FORMAT, FORMAT_VERSION, MAX_DEPTH, check_manifest
from tpufeed.sources.built.record_formats import RAW_BYTES, record_format_of_manifest
from tpufeed.sources.built.statistics import DatasetStatistics
from tpufeed.sources.built.verified_shard import VerifiedShard, file_crc32c
from tpufeed.sources.formats import format_for_path, get_format
from tpufeed.sources.sharded import ShardedSource
from tpufeed.storage.backends import (
    is_remote_url,
    list_prefix,
    read_range,
    scheme_of,
    schemes,
    stat,
)
from tpufeed.storage.cache.shard_cache import ShardCache
from tpufeed.storage.opener import FileIdentity, check_regular, open_regular
from tpufeed.storage.remote import RemoteFile
from tpufeed.storage.retry import RetryPolicy

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "ManifestSource",
    "file_crc32c",
    "is_dataset_path",
    "load_manifest",
    "remote_shard_url",
    "safe_shard_path",
]

MANIFEST_NAME = "manifest.json"
_MAX_MANIFEST_BYTES = 256 << 20
_NO_MANIFEST = (
    " (the folder has no manifest: the build did not finish, or this is not a "
    "dataset built by `tpufeed build`)"
)


def is_dataset_path(path: str | os.PathLike) -> bool:
    """Whether `path` names a built dataset (its folder or manifest, local or in a store such as
    gs:// or s3://) rather than record files: what `tpufeed inspect` and `tpufeed bench` open
    with `Dataset.open`."""
    path = os.fspath(path)
    if os.path.basename(path.rstrip("/")) == MANIFEST_NAME or os.path.isdir(path):
        return True
    # Object stores have no folders to test for: a URL that is no glob and names no record file.
    return (
        is_remote_url(path) and not any(c in path for c in "*?[") and format_for_path(path) is None
    )


def _shard_path_refusal(root: str, name: object, manifest_path: str) -> CorruptDataError | None:
    """Why shard `name` could lead outside the dataset root, without looking at any file."""

    def refuse(why: str) -> CorruptDataError:
        return CorruptDataError(
            f"{manifest_path}: shard path {name!r} {why}; shard paths must be "
            f"relative paths inside the dataset root {root}",
            path=manifest_path,
        )

    if not isinstance(name, str) or not name:
        return refuse("is not a non-empty string")
    if "\0" in name or "\\" in name:
        return refuse("contains a NUL byte or a backslash")
    if name.startswith("/") or os.path.isabs(name) or re.match(r"[A-Za-z]:", name) or "://" in name:
        return refuse("is absolute and escapes the dataset root")
    if any(part in ("..", "") for part in name.split("/")):
        return refuse("has a '..' or empty component and escapes the dataset root")
    return None


def safe_shard_path(root: str, name: object, manifest_path: str) -> str:
    """The local path of shard `name` under `root`; raises if `name` could lead outside it."""
    refusal = _shard_path_refusal(root, name, manifest_path)
    if refusal is not None:
        raise refusal
    path = os.path.join(root, str(name))  # a str: anything else is refused above
    real_root = os.path.realpath(root)
    real = os.path.realpath(path)
    if os.path.commonpath([real_root, real]) != real_root:
        raise CorruptDataError(
            f"{manifest_path}: shard path {name!r} resolves through a symlink to {real}, outside "
            f"the dataset root {root}; shard paths must be relative paths inside the dataset root",
            path=manifest_path,
        )
    return path


def remote_shard_url(root: str, name: object, manifest_path: str) -> str:
    """The URL (gs://, s3://) of shard `name` under the dataset prefix `root`; raises as
    `safe_shard_path` does for a name that could lead outside it."""
    refusal = _shard_path_refusal(root, name, manifest_path)
    if refusal is not None:
        raise refusal
    return f"{root}/{name}"


def load_manifest(
    path: str | os.PathLike, policy: RetryPolicy | None = None
) -> tuple[str, str, dict[str, Any]]:
    """(manifest path, dataset root, checked manifest) for a dataset folder or its manifest.

    For a dataset in an object store both are URLs (the root without a trailing slash), and
    `policy` retries the store's calls (default: `RetryPolicy()`).
    """
    path = os.fspath(path)
    if is_remote_url(path):
        manifest_path, root, data = _fetch_manifest(path, policy or RetryPolicy())
    elif "://" in path:
        raise InvalidArgumentError(
            f"{path}: datasets open from a local folder or a URL of an object store "
            f"({schemes()}); other URL schemes are not supported"
        )
    else:
        manifest_path, data = _read_manifest(path)
        root = os.path.dirname(os.path.abspath(manifest_path))
    if len(data) > _MAX_MANIFEST_BYTES:
        raise CorruptDataError(
            f"{manifest_path}: larger than {_MAX_MANIFEST_BYTES:,} bytes; not a tpufeed manifest",
            path=manifest_path,
        )
    try:
        manifest = json.loads(data)
    except ValueError as e:  # not UTF-8, not JSON, or an integer of more digits than int() takes
        raise CorruptDataError(f"{manifest_path}: not valid JSON: {e}", path=manifest_path) from e
    except RecursionError:
        raise CorruptDataError(
            f"{manifest_path}: JSON nested too deeply to parse; a tpufeed "
            f"manifest nests at most {MAX_DEPTH} levels",
            path=manifest_path,
        ) from None
    check_manifest(manifest, manifest_path)
    return manifest_path, root, manifest


def _not_a_manifest(path: str) -> None:
    """A local data file given to `Dataset.open` (a JSONL, CSV or record file): refused naming
    what opens it, not read as a manifest and refused as invalid JSON."""
    name = os.path.basename(path).lower()
    fmt = format_for_path(name)
    if fmt is not None:
        does = f"open it with Dataset.{fmt.constructor}({path!r})"
    elif name.endswith((".jsonl", ".ndjson", ".csv")):
        does = f"build a dataset of it first: tpufeed build --input {path} --output DIR"
    elif name.endswith((".tar", ".tgz", ".tar.gz")):
        does = f"open it with Dataset.from_webdataset({path!r})"
    else:
        return
    raise InvalidArgumentError(
        f"{path} is a data file, not a dataset folder or its {MANIFEST_NAME} (Dataset.open "
        f"opens what tpufeed build wrote): {does}"
    )


def _read_manifest(path: str) -> tuple[str, bytes]:
    """(manifest path, at most one byte more than the size cap) of a local folder or file."""
    if not os.path.isdir(path):
        _not_a_manifest(path)
    manifest_path = os.path.join(path, MANIFEST_NAME) if os.path.isdir(path) else path
    root = os.path.dirname(os.path.abspath(manifest_path))  # a link out of it is refused
    try:
        with os.fdopen(open_regular(manifest_path, root=root), "rb") as f:
            return manifest_path, f.read(_MAX_MANIFEST_BYTES + 1)
    except SourceNotFoundError:
        hint = _NO_MANIFEST if os.path.isdir(path) else ""
        raise SourceNotFoundError(
            f"no such file: {manifest_path}{hint}", path=manifest_path
        ) from None
    except OSError as e:
        raise SourceError(f"{manifest_path}: cannot read: {e}", path=manifest_path) from e


def _fetch_manifest(url: str, policy: RetryPolicy) -> tuple[str, str, bytes]:
    """(manifest URL, dataset root URL, bytes) of a folder in an object store, or of a `.json`
    object in it.

    Object stores have no folders to tell apart from objects, so a URL whose last part ends in
    `.json` is the manifest itself and any other is the folder holding `manifest.json`.
    """
    scheme = f"{scheme_of(url)}://"
    bucket, _, name = url[len(scheme) :].partition("/")
    folder = not name.rsplit("/", 1)[-1].endswith(".json")
    if folder:
        name = f"{name.rstrip('/')}/{MANIFEST_NAME}".lstrip("/")
    manifest_url = f"{scheme}{bucket}/{name}"
    try:
        obj = stat(manifest_url, policy)
    except SourceNotFoundError:
        raise SourceNotFoundError(
            f"no such object: {manifest_url}{_NO_MANIFEST if folder else ''}", path=manifest_url
        ) from None
    if obj.size > _MAX_MANIFEST_BYTES:  # refused before it is downloaded
        raise CorruptDataError(
            f"{manifest_url}: {obj.size:,} bytes, larger than "
            f"{_MAX_MANIFEST_BYTES:,} bytes; not a tpufeed manifest",
            path=manifest_url,
        )
    data = read_range(obj, 0, obj.size, policy) if obj.size else b""
    crc = google_crc32c.value(data)
    if obj.crc32c is not None and crc != obj.crc32c:
        raise CorruptDataError(
            f"{manifest_url}: downloaded bytes have CRC32C {crc:08x}, the "
            f"object's is {obj.crc32c:08x}",
            path=manifest_url,
        )
    return manifest_url, manifest_url.rpartition("/")[0], data


def _refuse_aliases(
    shards: Sequence[VerifiedShard], entries: list[dict[str, Any]], manifest_path: str
) -> None:
    """Raises if two entries name one local file (through a symlink or a hard link), or one
    names something other than a regular file; pins each shard to the file found (every later
    open must find that file, unchanged)."""
    seen: dict[tuple[int, int], int] = {}
    for i, shard in enumerate(shards):
        try:
            st = check_regular(shard.path)  # a FIFO or a device: refused now, never read
        except SourceNotFoundError:
            continue  # a missing shard is reported when it is read
        shard.pinned = FileIdentity.of(st)
        j = seen.setdefault((st.st_dev, st.st_ino), i)
        if j != i:
            raise CorruptDataError(
                f"{manifest_path}: shards[{j}].path {entries[j]['path']!r} and shards[{i}].path "
                f"{entries[i]['path']!r} are the same file ({os.path.realpath(shard.path)}): its "
                "records would be delivered twice",
                path=manifest_path,
            )


class ManifestSource(ShardedSource[VerifiedShard]):
    """The records of a built dataset (a folder or its manifest.json, local or gs://), decoded
    by the manifest's record format (tpufeed.codec or tf.train.Example dicts; raw bytes as
    they are); each shard is checked against the manifest on its first
    read, or all at once here with `verify=True`. gs:// shards are read through `cache`
    (default: `ShardCache()`); local datasets ignore it."""

    def __init__(
        self, path: str | os.PathLike, verify: bool = False, cache: ShardCache | None = None
    ):
        path = os.fspath(path)
        if not is_remote_url(path):
            self.manifest_path, self.root, self.manifest = load_manifest(path)
            files = [
                VerifiedShard(
                    safe_shard_path(self.root, entry["path"], self.manifest_path),
                    entry,
                    self.manifest["file_format"],
                    root=self.root,
                )
                for entry in self.manifest["shards"]
            ]
            _refuse_aliases(files, self.manifest["shards"], self.manifest_path)
        else:
            cache = cache or ShardCache()
            self.manifest_path, self.root, self.manifest = load_manifest(path, cache.retry)
            files = self._remote_shards(cache)
        super().__init__(files)
        self._statistics: DatasetStatistics | None = None  # read when first asked for
        self._records = record_format_of_manifest(self.manifest["record_format"]) or RAW_BYTES
        if verify:
            self.verify()
        else:  # never read, so never checked on a first read: a shard said to be empty
            for shard in self.files:
                if shard.num_records == 0:
                    shard.check_count()

    def _remote_shards(self, cache: ShardCache) -> list[VerifiedShard]:
        """The shards under the dataset prefix, each object version fixed by one listing."""
        file_format = self.manifest["file_format"]
        entries = self.manifest["shards"]
        urls = [remote_shard_url(self.root, entry["path"], self.manifest_path) for entry in entries]
        fmt = get_format(file_format)
        if fmt.needs_local_copy and not cache.max_bytes:
            raise InvalidArgumentError(
                f"{self.manifest_path}: {fmt.title} shards are read from local copies, so they "
                "need a shard cache; cache_bytes=0 leaves none"
            )
        listed = {obj.url: obj for obj in list_prefix(f"{self.root}/", cache.retry)}
        shards = []
        for url, entry in zip(urls, entries):
            obj = listed.get(url)
            if obj is None:
                raise SourceNotFoundError(
                    f"{url}: shard named in the manifest {self.manifest_path} is missing", path=url
                )
            shards.append(VerifiedShard(url, entry, file_format, RemoteFile(obj, cache)))
        return shards

    @property
    def schema(self) -> dict[str, Any] | None:
        """Per key: type, dtype, shape (null where it varies), ragged dims; None for raw bytes."""
        return self.manifest.get("schema")

    @property
    def statistics(self) -> DatasetStatistics:
        """What the build counted (`tpufeed.sources.built.statistics`), checked when first
        asked for: damaged statistics raise `CorruptDataError` here, never on a read."""
        if self._statistics is None:
            self._statistics = DatasetStatistics.of_manifest(self.manifest, self.manifest_path)
        return self._statistics

    def verify(self) -> None:
        """Checks every shard's size, CRC32C and record count now: a local file is read once,
        in full; a gs:// object by its metadata (an ArrayRecord shard's count by its footer;
        a TFRecord shard's when it is first read)."""
        for shard in self.files:  # first what needs no download, to fail fast on a gs:// dataset
            shard.verify()
        for shard in self.files:
            shard.check_count()

    def __getitem__(self, index: int) -> Any:
        return self.__getitems__([index])[0]

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> list[Any]:
        records = super().__getitems__(indices)
        if self._records is RAW_BYTES:
            return records
        decode, schema = self._records.decode, self.schema
        out = []
        for i, record in enumerate(records):
            try:
                out.append(decode(record, schema))
            except CodecError as e:
                index = int(np.asarray(indices).reshape(-1)[i])
                path, local = self.locate(index)
                raise CorruptDataError(
                    f"{path} record {local} (global record {index}): not a "
                    f"{self._records.manifest_name} record: {e}",
                    path=path,
                    record=local,
                ) from e
        return out

    def fingerprint(self) -> str:
        shards = ",".join(f"{os.path.basename(f.path)}:{len(f)}:{f.crc32c}" for f in self.files)
        return f"ManifestSource[{shards}]"

    def __repr__(self) -> str:
        return (
            f"ManifestSource({self.manifest_path!r}, {len(self.files)} "
            f"{self.manifest['file_format']} shards, {len(self)} records)"
        )
