"""A TFDS-prepared dataset found from its own metadata, without its builder's code.

TFDS prepares `name[/config]:version` into `data_dir/name[/config]/version/`: a
`dataset_info.json` (the file format, and per split its shard lengths and file name template)
and a `features.json` (how a record decodes), beside the record files. This module finds that
folder (the newest prepared version, or the one asked for; a config by name, or the default
that TFDS recorded in `.config/metadata.json`), reads both files through the one opener (local)
or one listing of the folder (gs://, s3://), each bounded in size, and names every shard file,
each inside the folder.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tpufeed.errors import InvalidArgumentError, SourceError, SourceNotFoundError
from tpufeed.sources.built.manifest import remote_shard_url, safe_shard_path
from tpufeed.storage.backends import is_remote_url, list_prefix, read_range
from tpufeed.storage.bounded import malformed, parsing
from tpufeed.storage.objects import RemoteObject
from tpufeed.storage.opener import open_regular
from tpufeed.storage.retry import RetryPolicy

__all__ = ["INFO_NAME", "MAX_METADATA_BYTES", "PreparedDataset", "prepared"]

INFO_NAME = "dataset_info.json"
FEATURES_NAME = "features.json"
MAX_METADATA_BYTES = 64 << 20  # a dataset_info.json of 100,000 shards is ~2 MB
READ_FORMATS = ("array_record", "tfrecord")
_NAME = re.compile(
    r"^(?P<name>[a-zA-Z]\w*)(/(?P<config>[\w+\-.]+))?(:(?P<version>[\d*]+\.[\d*]+\.[\d*]+))?$"
)
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
_TEMPLATE_FIELD = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class PreparedDataset:
    """What tpufeed reads of one prepared dataset: its folder (a path or a URL), the record
    file format, each split's shard lengths and files (in the order `dataset_info.json` lists
    the splits), and `features.json` as parsed."""

    folder: str
    file_format: str
    shard_lengths: dict[str, list[int]]
    files: dict[str, list[str]]
    features: dict[str, Any]
    objects: dict[str, RemoteObject] = field(default_factory=dict)  # a store's, by URL


def prepared(name: str, data_dir: str, policy: RetryPolicy) -> PreparedDataset:
    """The prepared dataset `name` (`name[/config][:version]`, TFDS's spelling) under `data_dir`."""
    found = _NAME.match(name) if isinstance(name, str) else None
    if found is None:
        raise InvalidArgumentError(
            f"from_tfds: {name!r} is not a TFDS name such as 'mnist', 'mnist:3.0.1' or "
            "'imagenet2012/subset:5.*.*'"
        )
    if found["config"] in (".", ".."):
        raise InvalidArgumentError(f"from_tfds: {name!r} names no config")
    folders = _Folders(data_dir.rstrip("/"), found["name"], policy)
    config = found["config"] or folders.default_config(found["name"])
    parent = "/".join(p for p in (found["name"], config) if p)
    folder = f"{folders.root}/{parent}/{_version(folders, parent, found['version'], name)}"
    info = _json(folders.read(f"{folder}/{INFO_NAME}"), f"{folder}/{INFO_NAME}")
    file_format, lengths, templates = _splits(info, f"{folder}/{INFO_NAME}")
    files = {}
    for split, shards in lengths.items():
        naming = _ShardNaming(info["name"], split, file_format, len(shards), templates[split])
        files[split] = [_shard_name(folders, folder, naming, i) for i in range(len(shards))]
    features = _json(folders.read(f"{folder}/{FEATURES_NAME}"), f"{folder}/{FEATURES_NAME}")
    return PreparedDataset(folder, file_format, lengths, files, features, folders.objects)


class _ShardNaming(NamedTuple):
    dataset: str
    split: str
    file_format: str
    shards: int
    template: Any


class _Folders:
    """Lists and reads under `root`, locally or in a store (one listing of the dataset
    `name`'s folder, kept: its configs, versions and files)."""

    def __init__(self, root: str, name: str, policy: RetryPolicy):
        self.root, self.policy = root, policy
        self.remote = is_remote_url(root)
        self.objects: dict[str, RemoteObject] = {}
        if self.remote:
            self.objects = {o.url: o for o in list_prefix(f"{root}/{name}/", policy)}
        elif not os.path.isdir(root):
            raise SourceNotFoundError(f"from_tfds: no such data_dir: {root}", path=root)

    def subfolders(self, parent: str) -> list[str]:
        where = f"{self.root}/{parent}"
        if self.remote:  # a folder is a name with objects under it
            inside = [url[len(where) + 1 :] for url in self.objects if url.startswith(f"{where}/")]
            return sorted({rest.split("/")[0] for rest in inside if "/" in rest})
        if not os.path.isdir(where):
            return []
        return sorted(n for n in os.listdir(where) if os.path.isdir(os.path.join(where, n)))

    def default_config(self, name: str) -> str | None:
        """None where `name`'s folder holds versions; else the config TFDS recorded as the
        default (`.config/metadata.json`), or the only one there."""
        subfolders = self.subfolders(name)
        if not subfolders or any(_VERSION.match(v) for v in subfolders):
            return None
        metadata = f"{self.root}/{name}/.config/metadata.json"
        if self.exists(metadata):
            default = _json(self.read(metadata), metadata).get("default_config_name")
            if isinstance(default, str) and default in subfolders:
                return default
        configs = [c for c in subfolders if not c.startswith(".")]
        if len(configs) == 1:
            return configs[0]
        raise InvalidArgumentError(
            f"from_tfds: {name!r} has configs {configs} under {self.root}/{name}; "
            f"name one, as in '{name}/{configs[0]}'"
        )

    def exists(self, path: str) -> bool:
        return path in self.objects if self.remote else os.path.lexists(path)

    def read(self, path: str) -> bytes:
        if self.remote:
            obj = self.objects.get(path)
            if obj is None:
                raise SourceNotFoundError(f"no such file: {path}", path=path)
            _check_size(obj.size, path)
            return read_range(obj, 0, obj.size, self.policy) if obj.size else b""
        with os.fdopen(open_regular(path, root=self.root), "rb") as f:
            data = f.read(MAX_METADATA_BYTES + 1)
        _check_size(len(data), path)
        return data


def _version(folders: _Folders, parent: str, wanted: str | None, name: str) -> str:
    """The version folder: `wanted` (a wildcard takes the newest that fits), else the newest
    one holding a dataset_info.json."""
    versions = [
        v
        for v in folders.subfolders(parent)
        if _VERSION.match(v) and folders.exists(f"{folders.root}/{parent}/{v}/{INFO_NAME}")
    ]
    pattern = re.compile("^" + re.escape(wanted).replace(r"\*", r"\d+") + "$") if wanted else None
    fitting = [v for v in versions if pattern is None or pattern.match(v)]
    if not fitting:
        raise SourceNotFoundError(
            f"from_tfds: {name!r} is not prepared under {folders.root}: "
            f"{folders.root}/{parent}/ holds "
            + (f"versions {versions}" if versions else f"no version folder with a {INFO_NAME}")
            + " (prepare it with tfds.builder(name, data_dir=...).download_and_prepare())",
            path=f"{folders.root}/{parent}",
        )
    return max(fitting, key=lambda v: tuple(int(p) for p in v.split(".")))


def _json(data: bytes, path: str) -> dict[str, Any]:
    with parsing(path, "its JSON"):
        value = json.loads(data)
    if not isinstance(value, dict):
        raise malformed(path, "its JSON", f"is a {type(value).__name__}, not an object")
    return value


def _splits(info: dict[str, Any], path: str) -> tuple[str, dict[str, list[int]], dict[str, str]]:
    """(file format, shard lengths and file name template of each split) of `info`."""
    file_format = _file_format(info, path)
    if not isinstance(info.get("name"), str) or not isinstance(info.get("splits"), list):
        raise malformed(path, "the dataset's name and splits", "are missing")
    lengths, templates = {}, {}
    for split in info["splits"]:
        with parsing(path, "a split"):
            name = split["name"]
            shards = [_count(n) for n in _listed(split["shardLengths"])]
            templates[name] = split.get(
                "filepathTemplate", "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"
            )
        if not isinstance(name, str) or any(n < 0 for n in shards):
            raise malformed(path, f"split {name!r}", f"has shard lengths {shards}")
        lengths[name] = shards
    return file_format, lengths, templates


def _file_format(info: dict[str, Any], path: str) -> str:
    """The format to read: ArrayRecord where the dataset is prepared in it too (random access
    without an index, as `tfds.data_source` prefers it), else TFRecord."""
    prepared = [info.get("fileFormat", "tfrecord")]
    alternatives = info.get("alternativeFileFormats", [])
    prepared += alternatives if isinstance(alternatives, list) else [alternatives]
    for file_format in READ_FORMATS:
        if file_format in prepared:
            return file_format
    raise InvalidArgumentError(
        f"{path}: the dataset is prepared as {' and '.join(map(repr, prepared))}; from_tfds "
        f"reads {' and '.join(READ_FORMATS)} (prepare it with file_format='array_record')"
    )


def _listed(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"shardLengths is {value!r}, not a list")
    return value


def _count(value: Any) -> int:
    """A shard length as TFDS writes it (an int64 as a string of digits; an int is taken)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"shard length {value!r} is not a count")
    if isinstance(value, str) and not value.isdigit():
        raise ValueError(f"shard length {value!r} is not a count")
    return int(value)


def _shard_name(folders: _Folders, folder: str, info: _ShardNaming, shard: int) -> str:
    """Shard `shard` of split `info.split`: TFDS's template filled, as a path (or URL) inside
    `folder`; a name leading out of it is refused."""
    count = info.shards
    digits = max(len(str(count)), 5)  # TFDS's _num_digits_needed
    values = {
        "DATASET": info.dataset,
        "SPLIT": info.split,
        "FILEFORMAT": info.file_format,
        "SHARD_INDEX": f"{shard:0{digits}d}",
        "NUM_SHARDS": f"{count:0{digits}d}",
        "SHARD_X_OF_Y": f"{shard:0{digits}d}-of-{count:0{digits}d}",
    }
    where = f"{folder}/{INFO_NAME}"
    template = info.template
    if not isinstance(template, str) or any(
        k not in values for k in _TEMPLATE_FIELD.findall(template)
    ):
        raise malformed(where, f"split {info.split!r}'s file name template", f"is {template!r}")
    name = _TEMPLATE_FIELD.sub(lambda m: values[m[1]], template)
    if folders.remote:
        return remote_shard_url(folder, name, where)
    return safe_shard_path(folder, name, where)


def _check_size(size: int, path: str) -> None:
    if size > MAX_METADATA_BYTES:
        raise SourceError(
            f"{path}: larger than {MAX_METADATA_BYTES:,} bytes; not TFDS's metadata", path=path
        )
