"""Shard files of a build: each written in place by its writer, the manifest last.

Each format's writer comes from `tpufeed.sources.formats`. Local outputs use `os`: a shard is
written in a temporary folder inside the output folder and renamed into it (atomic, no copy);
`gs://` and other remote outputs go through Beam's `FileSystems` (a shard is written to a
local temporary file first, because the ArrayRecord writer needs a local path, then uploaded
under its final name; object uploads are atomic, so no remote rename is needed).

Order: remove the old manifest before any shard is written (so the folder never pairs an old
manifest with new shards), write the shards in parallel, then delete shards of the old
manifest that the new one does not name and write the new manifest. Every step is safe to
repeat, so a retried step (a runner may retry a failed bundle) completes the job.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable
from typing import Any

from tpufeed.errors import InvalidArgumentError, SourceError, plural
from tpufeed.sources.formats import get_format
from tpufeed.sources.manifest import MANIFEST_NAME, file_crc32c, safe_shard_path

__all__ = [
    "check_output",
    "delete_paths",
    "exists",
    "finalize",
    "is_remote",
    "join",
    "manifest_text",
    "old_shard_names",
    "read_text",
    "remove_partial",
    "shard_name",
    "temp_dir",
    "write_shard_file",
    "write_shard_in_place",
]

log = logging.getLogger("tpufeed.build")
_UPLOAD_CHUNK = 8 << 20


def is_remote(path: str) -> bool:
    return "://" in path


def join(directory: str, name: str) -> str:
    return (
        f"{directory.rstrip('/')}/{name}" if is_remote(directory) else os.path.join(directory, name)
    )


def shard_name(prefix: str, index: int, num_shards: int, file_format: str) -> str:
    return f"{prefix}-{index:05d}-of-{num_shards:05d}{get_format(file_format).extension}"


def temp_dir(output: str, build_id: str) -> str:
    """The folder in `output` where build `build_id` spills its chunks (`tpufeed.beam.spill`)
    and, locally, writes shards before renaming them."""
    return join(output, f".tpufeed-tmp-{build_id}")


def remove_partial(output: str, build_id: str) -> None:
    """Removes what build `build_id` left in its temporary folder: half-written local shards
    and spilled chunks (after the build, or after a failure)."""
    folder = temp_dir(output, build_id)
    if not is_remote(output):
        delete_paths([folder])
        return
    from apache_beam.io.filesystems import FileSystems

    found = [m.path for m in FileSystems.match([f"{folder}/*"])[0].metadata_list]
    if found:
        FileSystems.delete(found)


def check_output(
    output: str, num_shards: int, file_format: str, *, overwrite: bool, prefix: str = "data"
) -> None:
    """Refuses, before any work, an output that cannot be a folder, one that already holds a
    dataset (or files this build would replace) unless `overwrite`, and a local one that
    cannot be made or written."""
    if not is_remote(output):
        path = probe = os.path.abspath(output)
        while not os.path.lexists(probe) and os.path.dirname(probe) != probe:
            probe = os.path.dirname(probe)  # the nearest part of the path that exists
        if os.path.exists(probe) and not os.path.isdir(probe):
            where = "is a file" if probe == path else f"cannot be made: {probe} is a file"
            raise InvalidArgumentError(
                f"--output {output} {where}; the output is a dataset folder: name a new folder"
            )
    if not overwrite:
        _check_not_replacing(output, num_shards, file_format, prefix)
    if not is_remote(output):  # a remote probe would cost requests, and may need a bucket role
        _check_writable(output)


def _check_not_replacing(output: str, num_shards: int, file_format: str, prefix: str) -> None:
    manifest = join(output, MANIFEST_NAME)
    if exists(manifest):
        raise InvalidArgumentError(
            f"--output {output} already holds a dataset ({manifest}); "
            "pass --overwrite to replace it, or name another folder"
        )
    if not is_remote(output):  # a remote check would cost a request per shard
        names = [shard_name(prefix, i, num_shards, file_format) for i in range(num_shards)]
        clash = [n for n in names if os.path.lexists(os.path.join(output, n))]
        if clash:
            raise InvalidArgumentError(
                f"--output {output} already holds {plural(len(clash), 'file')} this build "
                f"would replace ({clash[0]}{', ...' if len(clash) > 1 else ''}); pass "
                "--overwrite to replace them, or name another folder"
            )


def _check_writable(output: str) -> None:
    """Makes the local folder `output` and writes a file in it, then removes what it made:
    a folder that cannot be made or written (read-only disk, /proc) is refused before the
    pipeline runs, not met by its last step."""
    path = os.path.abspath(output)
    made = []  # the missing folders, deepest first, removed again below
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        made.append(path)
        path = os.path.dirname(path)
    step = f"made in {path}"  # the nearest folder that exists
    try:
        os.makedirs(output, exist_ok=True)
        step = "written"
        fd, probe = tempfile.mkstemp(prefix=".tpufeed-probe-", dir=output)
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        where = f" ({e.filename})" if e.filename and e.filename != output else ""
        raise InvalidArgumentError(
            f"--output {output} cannot be {step}: {e.strerror or e}"
            f"{where}; name a folder on a writable disk"
        ) from e
    finally:
        for folder in made:
            try:
                os.rmdir(folder)
            except OSError:
                break


def write_shard_file(
    path: str, records: Iterable[bytes], file_format: str, options: str | None
) -> tuple[int, int, str]:
    """Writes one shard at `path` (local or remote); returns (records, bytes, CRC32C hex)."""
    write = get_format(file_format).write
    if not is_remote(path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        count = write(path, records, options)
        return (count, *file_crc32c(path))
    from apache_beam.io.filesystems import FileSystems

    with tempfile.TemporaryDirectory(prefix="tpufeed-shard-") as local_dir:
        local = os.path.join(local_dir, path.rsplit("/", 1)[-1])
        count = write(local, records, options)
        size, crc = file_crc32c(local)
        try:
            with open(local, "rb") as src, FileSystems.create(path) as dst:
                shutil.copyfileobj(src, dst, _UPLOAD_CHUNK)
        except Exception as e:
            raise SourceError(f"cannot upload shard to {path}: {e}", path=path) from e
    return count, size, crc


def write_shard_in_place(
    output: str,
    name: str,
    build_id: str,
    records: Iterable[bytes],
    file_format: str,
    options: str | None,
) -> tuple[int, int, str]:
    """Writes shard `name` into `output`: locally under a temporary name then renamed in the
    same folder, remotely uploaded under its name. Returns (records, bytes, CRC32C hex)."""
    final = join(output, name)
    if is_remote(output):
        return write_shard_file(final, records, file_format, options)
    partial = join(temp_dir(output, build_id), name)  # same filesystem: the rename is atomic
    try:
        result = write_shard_file(partial, records, file_format, options)
        os.replace(partial, final)
    except BaseException:
        delete_paths([partial])
        raise
    return result


def exists(path: str) -> bool:
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


def read_text(path: str) -> str | None:
    if not exists(path):
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


def old_shard_names(output: str) -> list[str]:
    """Shard names of a manifest already in `output` that are plain names in the folder."""
    try:
        text = read_text(join(output, MANIFEST_NAME))
        old = json.loads(text) if text else {}
        names = [s["path"] for s in old.get("shards", [])]
    except (ValueError, TypeError, KeyError, AttributeError):
        return []  # unreadable: leave its files alone
    return [
        n
        for n in names
        if isinstance(n, str)
        and n
        and "/" not in n
        and "\\" not in n
        and n not in (".", "..", MANIFEST_NAME)
    ]


def finalize(output: str, manifest: dict[str, Any], old_names: Iterable[str] = ()) -> None:
    """Deletes the shards of a replaced dataset (`old_names`) that `manifest` does not name,
    then writes the manifest: the one file that makes the folder a dataset."""
    names = [shard["path"] for shard in manifest["shards"]]
    manifest_path = join(output, MANIFEST_NAME)
    if not is_remote(output):
        os.makedirs(output, exist_ok=True)
        for name in names:  # names are ours, but a folder may hold symlinks: check anyway
            safe_shard_path(output, name, manifest_path)
    stale = [n for n in old_names if n not in names]
    delete_paths([join(output, n) for n in stale])
    _write_text(manifest_path, manifest_text(manifest))
    log.info(
        "manifest %s: %s, %s",
        manifest_path,
        plural(len(names), "shard"),
        plural(manifest["num_records"], "record"),
    )
