"""The switch from the dataset in a build's output to the new one, once the new one is complete.

Until `publish`, the output holds what it held before (a dataset keeps opening and reading
whole, whatever happens to the build), and `discard` removes everything the build made:

- locally the new dataset is a staging folder beside the output (`shard_files.staging_root`).
  `publish` exchanges the two folders in one `renameat2(RENAME_EXCHANGE)` on Linux, so the
  output's path always names a whole dataset; where the call is missing (other systems, some
  file systems) it is two renames, between which the path names nothing for an instant. The
  old folder is then removed, after the files in it that were not part of its dataset are
  moved into the new one. A reader that has the old dataset open keeps reading the files it
  opened; one that opens a shard again by name gets the new file, which fails its manifest's
  checksum with a named error;
- remotely (`gs://`) the shards were uploaded under names the old manifest does not use, and
  `publish` writes `manifest.json` (an object upload: atomic), then deletes the old shards
  that the new manifest does not name.

>>> publish("data/train", build_id, manifest_text, old_names)  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import os
import shutil
import stat
from collections.abc import Iterable

from tpufeed.beam.write import shard_files
from tpufeed.errors import SourceError, plural
from tpufeed.sources.built.manifest import MANIFEST_NAME

__all__ = ["discard", "leftover_builds", "publish"]

log = logging.getLogger("tpufeed.build")
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def publish(output: str, build_id: str, text: str, old_names: Iterable[str]) -> None:
    """Makes the dataset staged by build `build_id` (manifest `text`) the one in `output`.
    Safe to repeat: once published, a second call finds the manifest in place and returns."""
    if shard_files.is_remote(output):
        _publish_remote(output, build_id, text, list(old_names))
    else:
        _publish_local(output, build_id, text, list(old_names))
    log.info("published %s", output)


def discard(output: str, build_id: str, shard_names: Iterable[str] = ()) -> None:
    """Removes what build `build_id` made (its staging folder locally; remotely its temporary
    folder, its staged manifest and the shards it uploaded, `shard_names`), leaving the output
    as it was."""
    if not shard_files.is_remote(output):
        shard_files.delete_paths([shard_files.staging_root(output, build_id)])
        return
    shard_files.remove_partial(output, build_id)
    old = set(shard_files.old_shard_names(output))  # still the old dataset's: never published
    shard_files.delete_paths(
        [shard_files.join(output, n) for n in shard_names if n not in old]
        + [shard_files.staged_manifest(output, build_id)]
    )


def leftover_builds(output: str) -> list[str]:
    """Staging folders beside a local `output` that no running build may own any more: those
    of builds that were killed (a stopped build removes its own)."""
    if shard_files.is_remote(output):
        return []
    parent, name = os.path.split(os.path.realpath(output))
    start = f".{name}.tpufeed-build-"
    try:
        return sorted(os.path.join(parent, n) for n in os.listdir(parent) if n.startswith(start))
    except OSError:
        return []


def _publish_remote(output: str, build_id: str, text: str, old_names: list[str]) -> None:
    staged = shard_files.staged_manifest(output, build_id)
    target = shard_files.join(output, MANIFEST_NAME)
    if not shard_files.exists(staged) and shard_files.read_text(target) == text:
        return  # an earlier try published it
    shard_files.write_text(target, text)  # the switch
    names = {s["path"] for s in json.loads(text)["shards"]}
    stale = [n for n in old_names if n not in names]
    shard_files.delete_paths([shard_files.join(output, n) for n in stale] + [staged])
    if stale:
        log.info("deleted %s of the replaced dataset", plural(len(stale), "shard"))


def _publish_local(output: str, build_id: str, text: str, old_names: list[str]) -> None:
    staged = shard_files.staging_root(output, build_id)
    real = os.path.realpath(output)
    if not os.path.isdir(staged):
        if shard_files.read_text(os.path.join(real, MANIFEST_NAME)) == text:
            return  # an earlier try published it
        raise SourceError(
            f"{output}: the new dataset's staging folder {staged} is gone; nothing was "
            "published and the output is as it was",
            path=staged,
        )
    if os.path.lexists(real) and not os.path.isdir(real):
        raise SourceError(
            f"--output {output} stopped being a folder during the build (it is a file now); "
            "the new dataset was not published. Name a folder and run it again",
            path=real,
        )
    if not os.path.lexists(real) or _is_empty_dir(real):
        os.makedirs(os.path.dirname(real), exist_ok=True)
        os.replace(staged, real)  # over nothing, or over an empty folder: one rename
        return
    with contextlib.suppress(OSError):
        os.chmod(staged, stat.S_IMODE(os.stat(real).st_mode))  # the folder keeps its mode
    old = _exchange(staged, real, build_id)
    _carry_over(old, real, old_names)
    shutil.rmtree(old, ignore_errors=True)


def _is_empty_dir(path: str) -> bool:
    try:
        return os.path.isdir(path) and not os.listdir(path)
    except OSError:
        return False


def _exchange(staged: str, real: str, build_id: str) -> str:
    """Puts folder `staged` at `real` and returns where the old `real` went: one atomic
    exchange where the system has it, else two renames."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is not None:
        done = renameat2(
            _AT_FDCWD, os.fsencode(staged), _AT_FDCWD, os.fsencode(real), _RENAME_EXCHANGE
        )
        if done == 0:
            return staged  # the old folder is where the staging folder was
        code = ctypes.get_errno()
        if code not in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
            raise OSError(code, os.strerror(code), real)
    parent, name = os.path.split(real)
    old = os.path.join(parent, f".{name}.tpufeed-old-{build_id}")
    os.rename(real, old)
    os.rename(staged, real)
    return old


def _carry_over(old: str, new: str, old_names: list[str]) -> None:
    """Moves the entries of the replaced folder that were not part of its dataset (the
    manifest, its shards, builds' temporary folders) into the new one, unless it has them."""
    dataset = {MANIFEST_NAME} | {n.split("/", 1)[0] for n in old_names}
    for entry in os.listdir(old):
        if entry in dataset or entry.startswith((".tpufeed-tmp-", ".tpufeed-probe-")):
            continue
        if not os.path.lexists(os.path.join(new, entry)):
            with contextlib.suppress(OSError):
                os.rename(os.path.join(old, entry), os.path.join(new, entry))
