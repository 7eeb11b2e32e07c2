"""Shard files of a build: each written in place by its writer, the manifest last.

Each format's writer comes from `tpufeed.sources.formats`. The dataset already in the output
stays whole until the new one is complete (`tpufeed.beam.write.publish` switches them):

- a local output is built in a staging folder beside it (`.NAME.tpufeed-build-ID`, on the same
  disk): each shard is written in its temporary folder and renamed into it (atomic, no copy),
  then the manifest; the staging folder then takes the output's place in one rename;
- `gs://` and other remote outputs go through Beam's `FileSystems`: a shard is written to a
  local temporary file first (the ArrayRecord writer needs a local path), then uploaded under
  its final name (object uploads are atomic). Names the old manifest uses are never written:
  the shards then go to a folder of their own in the output (`build-ID/`), and the manifest,
  written last, is the switch.

Every step is safe to repeat, so a retried step (a runner may retry a failed bundle) completes
the job.
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
from tpufeed.sources.built.manifest import MANIFEST_NAME, file_crc32c, safe_shard_path
from tpufeed.sources.formats import get_format

__all__ = [
    "check_output",
    "delete_paths",
    "exists",
    "is_remote",
    "join",
    "manifest_text",
    "old_shard_names",
    "read_text",
    "remove_partial",
    "shard_dir",
    "shard_name",
    "staged_manifest",
    "staging_root",
    "temp_dir",
    "write_shard_file",
    "write_shard_in_place",
    "write_staged_manifest",
    "write_text",
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


def staging_root(output: str, build_id: str) -> str:
    """Where build `build_id` puts the dataset it makes: locally a folder beside the output
    (its real path: a symlinked output is replaced where it points), remotely the output."""
    if is_remote(output):
        return output.rstrip("/")
    real = os.path.realpath(output)
    parent, name = os.path.split(real)
    return os.path.join(parent, f".{name}.tpufeed-build-{build_id}")


def staged_manifest(output: str, build_id: str) -> str:
    """Where build `build_id` writes its manifest before the switch (`tpufeed.beam.write.publish`)."""
    if is_remote(output):
        return join(output, f".tpufeed-manifest-{build_id}.json")
    return join(staging_root(output, build_id), MANIFEST_NAME)


def temp_dir(output: str, build_id: str) -> str:
    """The folder where build `build_id` spills its chunks (`tpufeed.beam.write.spill`) and, locally,
    writes shards before renaming them into the staging folder."""
    return join(staging_root(output, build_id), f".tpufeed-tmp-{build_id}")


def shard_dir(output: str, build_id: str, names: Iterable[str], old_names: Iterable[str]) -> str:
    """The folder, in the output, of the new shards `names` ('' or 'build-ID/'): a remote
    output's shards are written under their final names, so they go to a folder of their own
    when the dataset being replaced uses any of those names."""
    if not is_remote(output) or not set(names) & set(old_names):
        return ""
    return f"build-{build_id}/"


def remove_partial(output: str, build_id: str) -> None:
    """Removes what build `build_id` left in its temporary folder: half-written local shards
    and spilled chunks (after the build, or after a failure; `tpufeed.beam.write.publish.discard`
    removes the whole new dataset)."""
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
        _check_replaceable(output)
        _check_writable(os.path.dirname(os.path.realpath(output)), beside=output)


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


def _check_replaceable(output: str) -> None:
    """A local output is replaced by renaming a folder beside it over it: a mount point
    cannot be, so it is refused before any work."""
    real = os.path.realpath(output)
    if os.path.isdir(real) and os.path.ismount(real):
        raise InvalidArgumentError(
            f"--output {output} is a mount point: the build writes the new dataset into a "
            "folder beside the output and then renames it into its place, which a mount "
            "point cannot take; name a folder inside it"
        )


def _check_writable(output: str, beside: str | None = None) -> None:
    """Makes the local folder `output` and writes a file in it, then removes what it made:
    a folder that cannot be made or written (read-only disk, /proc) is refused before the
    pipeline runs, not met by its last step. `beside`: `output` is the folder where the
    dataset `beside` is staged."""
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
        what = f"--output {output}" if beside is None else f"--output {beside}: its folder {output}"
        staged = "" if beside is None else " (the new dataset is written there, then renamed)"
        raise InvalidArgumentError(
            f"{what} cannot be {step}: {e.strerror or e}{where}{staged}; name a folder on a "
            "writable disk"
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
    """Writes shard `name` (a path in the dataset) of build `build_id`: locally under a
    temporary name then renamed into the staging folder, remotely uploaded under its name in
    `output`. Returns (records, bytes, CRC32C hex)."""
    final = join(staging_root(output, build_id), name)
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


def write_text(path: str, text: str) -> None:
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
    """Shard paths of a manifest already in `output` that lie inside it (plain relative paths)."""
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
        and "\\" not in n
        and n != MANIFEST_NAME
        and all(part not in ("", ".", "..") for part in n.split("/"))
    ]


def write_staged_manifest(output: str, build_id: str, manifest: dict[str, Any]) -> str:
    """Writes the manifest of build `build_id` where `tpufeed.beam.write.publish` switches it in
    from; returns its text. Locally the shard paths are checked to stay in the folder."""
    text = manifest_text(manifest)
    path = staged_manifest(output, build_id)
    if not is_remote(output):
        root = staging_root(output, build_id)
        if not os.path.isdir(root):
            raise SourceError(
                f"{output}: the staging folder {root} of this build is gone; the dataset "
                "was published by an earlier try of this step, or removed",
                path=root,
            )
        for shard in manifest["shards"]:  # names are ours, but check anyway
            safe_shard_path(root, shard["path"], path)
    write_text(path, text)
    return text
