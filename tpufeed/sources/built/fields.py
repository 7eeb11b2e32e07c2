"""What a dataset's manifest.json must hold, field by field, and the check of a loaded one.

A manifest names its format and version, the file and record formats of its shards, and each
shard's path, record count, size and CRC32C (`tpufeed.sources.built.manifest` shows one whole).
`check_manifest` refuses one that is malformed, nested too deeply, of a newer version, or that
names one file twice, naming the field; paths are checked against the dataset root, and
shards against their entries, when the dataset opens (`tpufeed.sources.built.manifest`).
"""

from __future__ import annotations

import posixpath
import re
from typing import Any, TypeGuard

from tpufeed.errors import CorruptDataError
from tpufeed.sources.built.record_formats import manifest_names, record_format_of_manifest
from tpufeed.sources.formats import FORMATS, writable_formats

__all__ = ["FORMAT", "FORMAT_VERSION", "MAX_COUNT", "MAX_DEPTH", "check_manifest"]

FORMAT = "tpufeed-dataset"
FORMAT_VERSION = 1
MAX_DEPTH = 64  # lists and objects within each other; a manifest needs about 5
MAX_COUNT = (1 << 63) - 1  # record counts and sizes are int64 everywhere they are used
_CRC_RE = re.compile(r"[0-9a-f]{8}")


def check_manifest(manifest: object, where: str) -> None:
    """Raises CorruptDataError naming `where` and the field if `manifest` is malformed."""
    if not isinstance(manifest, dict):
        raise CorruptDataError(
            f"{where}: a manifest is a JSON object, got {type(manifest).__name__}", path=where
        )
    if _depth(manifest) > MAX_DEPTH:
        raise CorruptDataError(
            f"{where}: JSON nested more than {MAX_DEPTH} levels deep; a "
            f"tpufeed manifest nests at most {MAX_DEPTH}",
            path=where,
        )
    file_format = _checked_file_format(manifest, where)
    shards = manifest.get("shards")
    if not isinstance(shards, list) or not shards:
        raise _field_error(where, "'shards'", "must be a non-empty list")
    for i, shard in enumerate(shards):
        _check_shard_entry(i, shard, file_format, where)
    _refuse_repeated_paths(shards, where)
    total = sum(shard["num_records"] for shard in shards)
    if total > MAX_COUNT:
        raise _field_error(where, "'shards'", f"hold {total:,} records, more than {MAX_COUNT:,}")
    if manifest.get("num_records") != total:
        raise _field_error(
            where,
            "'num_records'",
            f"is {manifest.get('num_records')!r} but the shards hold {total}",
        )


def _field_error(where: str, field: str, why: str) -> CorruptDataError:
    return CorruptDataError(f"{where}: manifest field {field} {why}", path=where)


def _checked_file_format(manifest: dict[str, Any], where: str) -> str:
    """The manifest's file format, once its format, version and record format are checked."""
    if manifest.get("format") != FORMAT:
        raise _field_error(where, "'format'", f"is {manifest.get('format')!r}, expected {FORMAT!r}")
    version = manifest.get("format_version")
    if not _is_count(version) or not 1 <= version <= FORMAT_VERSION:
        raise _field_error(
            where,
            "'format_version'",
            f"is {version!r}; this tpufeed reads "
            f"versions 1 to {FORMAT_VERSION} (a newer tpufeed wrote it?)",
        )
    file_format = manifest.get("file_format")
    # Only formats the build writes: a manifest never lists shards of a read-only format.
    if not isinstance(file_format, str) or file_format not in writable_formats():
        raise _field_error(
            where, "'file_format'", f"is {file_format!r}, expected one of {writable_formats()}"
        )
    if record_format_of_manifest(manifest.get("record_format")) is None:
        raise _field_error(
            where,
            "'record_format'",
            f"is {manifest.get('record_format')!r}, expected one of {manifest_names()}",
        )
    return file_format


def _check_shard_entry(i: int, shard: object, file_format: str, where: str) -> None:
    """Raises unless `shard`, entry `i` of the list, names a file and gives its counts and CRC."""
    if not isinstance(shard, dict):
        raise _field_error(where, f"shards[{i}]", "must be an object")
    if "path" not in shard:
        raise _field_error(
            where, f"shards[{i}].path", "is missing: every shard entry names its file"
        )
    for key in ("num_records", "num_bytes"):
        if not _is_count(shard.get(key)):
            raise _field_error(where, f"shards[{i}].{key}", f"is {shard.get(key)!r}, not a count")
    if not isinstance(shard.get("crc32c"), str) or not _CRC_RE.fullmatch(shard["crc32c"]):
        raise _field_error(
            where, f"shards[{i}].crc32c", f"is {shard.get('crc32c')!r}, not 8 hex digits"
        )
    problem = FORMATS[file_format].count_problem(shard["num_records"], shard["num_bytes"])
    if problem is not None:
        raise _field_error(
            where, f"shards[{i}].num_records", f"is {shard['num_records']}: {problem}"
        )


def _refuse_repeated_paths(shards: list[dict[str, Any]], where: str) -> None:
    """Spellings of one file ("x", "./x", "a/./x") are one shard: its records would come twice."""
    seen: dict[str, int] = {}
    for i, shard in enumerate(shards):
        name = shard["path"]
        key = posixpath.normpath(name) if isinstance(name, str) and name else repr(name)
        if key in seen:
            j = seen[key]
            raise _field_error(
                where,
                "'shards'",
                f"names the same file twice: shards[{j}].path "
                f"{shards[j]['path']!r} and shards[{i}].path {name!r} (its "
                "records would be delivered twice)",
            )
        seen[key] = i


def _depth(value: object) -> int:
    """How deeply lists and objects nest in `value`, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level <= MAX_DEPTH:  # deeper is refused anyway: no need to walk it all
                children = item.values() if isinstance(item, dict) else item
                stack.extend((child, level + 1) for child in children)
    return deepest


def _is_count(value: object) -> TypeGuard[int]:
    """A count or a size: an int from 0 to `MAX_COUNT` (what an int64 index can address)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT
