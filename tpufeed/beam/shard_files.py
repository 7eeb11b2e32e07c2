"""Shard files of a build: written under temporary names, then finalized with the manifest last.

Local outputs use `os` (renames are atomic); `gs://` and other remote outputs go through
Beam's `FileSystems` (a shard is written to a local temporary file first, because the
ArrayRecord writer needs a local path, then uploaded; object uploads are atomic).

Finalize order: remove the old manifest (so the folder never pairs an old manifest with new
shards), move the shards to their final names, delete shards of the old manifest that the new
one does not name, remove the temporary folder, and write the new manifest. Every step is safe
to repeat, so a retried finalize (a runner may retry a failed bundle) completes the job.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable
from typing import Any

from tpufeed.errors import SourceError
from tpufeed.sources.array_record import write_array_records
from tpufeed.sources.manifest import (FILE_EXTENSIONS, MANIFEST_NAME, file_crc32c,
                                      safe_shard_path)
from tpufeed.sources.tfrecord import write_tfrecords

__all__ = ["delete_paths", "finalize", "is_remote", "join", "manifest_text", "read_text",
           "shard_name", "temp_dir", "write_shard_file"]

log = logging.getLogger("tpufeed.build")
_UPLOAD_CHUNK = 8 << 20


def is_remote(path: str) -> bool:
    return "://" in path


def join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}" if is_remote(directory) else os.path.join(directory, name)


def shard_name(prefix: str, index: int, num_shards: int, file_format: str) -> str:
    return f"{prefix}-{index:05d}-of-{num_shards:05d}{FILE_EXTENSIONS[file_format]}"


def temp_dir(output: str, build_id: str) -> str:
    return join(output, f".tpufeed-tmp-{build_id}")


def _write_local(path: str, records: Iterable[bytes], file_format: str, options: str) -> int:
    if file_format == "array_record":
        return write_array_records(path, records, options=options)
    return write_tfrecords(path, records)


def write_shard_file(path: str, records: Iterable[bytes], file_format: str,
                     options: str) -> tuple[int, int, str]:
    """Writes one shard at `path` (local or remote); returns (records, bytes, CRC32C hex)."""
    if not is_remote(path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        count = _write_local(path, records, file_format, options)
        return (count, *file_crc32c(path))
    from apache_beam.io.filesystems import FileSystems

    with tempfile.TemporaryDirectory(prefix="tpufeed-shard-") as local_dir:
        local = os.path.join(local_dir, path.rsplit("/", 1)[-1])
        count = _write_local(local, records, file_format, options)
        size, crc = file_crc32c(local)
        try:
            with open(local, "rb") as src, FileSystems.create(path) as dst:
                shutil.copyfileobj(src, dst, _UPLOAD_CHUNK)
        except Exception as e:  # noqa: BLE001 - remote filesystems raise their own types
            raise SourceError(f"cannot upload shard to {path}: {e}", path=path) from e
    return count, size, crc


def _exists(path: str) -> bool:
    if not is_remote(path):
        return os.path.exists(path)
    from apache_beam.io.filesystems import FileSystems
    return FileSystems.exists(path)


def delete_paths(paths: list[str]) -> None:
    for path in paths:
        if not is_remote(path):
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.lexists(path):
                os.remove(path)
        else:
            from apache_beam.io.filesystems import FileSystems
            if FileSystems.exists(path):
                FileSystems.delete([path])


def _move(src: str, dst: str) -> None:
    if not is_remote(src):
        os.replace(src, dst)
        return
    from apache_beam.io.filesystems import FileSystems
    FileSystems.rename([src], [dst])


def read_text(path: str) -> str | None:
    if not _exists(path):
        return None
    if not is_remote(path):
        with open(path, encoding="utf-8") as f:
            return f.read()
    from apache_beam.io.filesystems import FileSystems
    with FileSystems.open(path) as f:
        return f.read().decode("utf-8")


def _write_text(path: str, text: str) -> None:
    data = text.encode("utf-8")
    if is_remote(path):
        from apache_beam.io.filesystems import FileSystems
        with FileSystems.create(path, mime_type="application/json") as f:
            f.write(data)
        return
    tmp = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def manifest_text(manifest: dict[str, Any]) -> str:
    """The manifest as stable JSON: sorted keys, so equal builds give equal bytes."""
    return json.dumps(manifest, indent=1, sort_keys=True, allow_nan=False) + "\n"


def _old_shard_names(output: str) -> list[str]:
    """Shard names of a manifest already in `output` that are plain names in the folder."""
    try:
        text = read_text(join(output, MANIFEST_NAME))
        old = json.loads(text) if text else {}
        names = [s["path"] for s in old.get("shards", [])]
    except (ValueError, TypeError, KeyError, AttributeError):
        return []  # unreadable: leave its files alone
    return [n for n in names if isinstance(n, str) and n and "/" not in n and "\\" not in n
            and n not in (".", "..", MANIFEST_NAME)]


def finalize(output: str, tmp: str, manifest: dict[str, Any]) -> None:
    """Moves the temporary shards of `manifest` into `output`, then writes the manifest."""
    names = [shard["path"] for shard in manifest["shards"]]
    manifest_path = join(output, MANIFEST_NAME)
    if not is_remote(output):
        os.makedirs(output, exist_ok=True)
        for name in names:  # names are ours, but a folder may hold symlinks: check anyway
            safe_shard_path(output, name, manifest_path)
    stale = [n for n in _old_shard_names(output) if n not in names]
    delete_paths([manifest_path])
    for shard, name in zip(manifest["shards"], names):
        src, dst = join(tmp, name), join(output, name)
        if _exists(src):
            _move(src, dst)
        elif not _exists(dst):
            raise SourceError(f"cannot finalize {output}: shard {src} is missing "
                              "(was the temporary folder removed during the build?)", path=src)
        log.info("shard %s: %d records, %d bytes, crc32c %s", dst, shard["num_records"],
                 shard["num_bytes"], shard["crc32c"])
    delete_paths([join(output, n) for n in stale] + [tmp])
    _write_text(manifest_path, manifest_text(manifest))
    log.info("manifest %s: %d shards, %d records", manifest_path, len(names),
             manifest["num_records"])
