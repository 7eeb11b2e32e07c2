"""What the fault suite does to a file, and what every case must leave: how tpufeed's reading
ended (`outcome`), no temporary file, no process of its own still running.

The changes are the ways files change under a reader: another file of the same size and
modification time renamed over it (a new inode, as a rewrite in place leaves it), one renamed
over it as it is, a symlink to another file put in its place, a FIFO, a symlink to a copy of
its bytes out of the dataset's folder.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import glob
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

from tpufeed.errors import TpufeedError

TEMPORARY_MARKS = (".tmp-", ".part-", ".tmp")  # derived.temporary_name, the shard cache's parts


def same_size_and_time(path: Path, other: Path) -> None:
    """`other`'s bytes renamed over `path`, with `path`'s modification time: a new inode."""
    before = os.lstat(path)
    staged = path.with_name(path.name + ".staged")
    shutil.copyfile(other, staged)
    os.utime(staged, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(staged, path)
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns), path
    assert after.st_ino != before.st_ino


def renamed_over(path: Path, other: Path) -> None:
    staged = path.with_name(path.name + ".staged")
    shutil.copyfile(other, staged)
    os.replace(staged, path)


def symlink(path: Path, other: Path) -> None:
    """A symlink to a copy of `other` in a folder inside `path`'s (inside any root)."""
    inside = path.parent / "elsewhere"
    inside.mkdir(exist_ok=True)
    shutil.copyfile(other, inside / path.name)
    path.unlink()
    path.symlink_to(inside / path.name)


def fifo(path: Path, other: Path | None = None) -> None:
    path.unlink()
    os.mkfifo(path)


def symlink_out(path: Path, outside: Path) -> None:
    """A symlink to a copy of `path`'s own bytes in the folder `outside`."""
    outside.mkdir(parents=True, exist_ok=True)
    target = outside / f"{path.parent.name}-{path.name}"
    shutil.copyfile(path, target)
    path.unlink()
    path.symlink_to(target)


CHANGES: dict[str, Callable[[Path, Path], None]] = {
    "same size and time": same_size_and_time,
    "renamed over": renamed_over,
    "symlink": symlink,
    "fifo": fifo,
    "symlink out": symlink_out,
}


def outcome(read: Callable[[], list[Any]], expected: list[Any], named: str) -> tuple[str, str]:
    """How `read()` ended: "right" (the `expected` records), "named" (a tpufeed error naming
    `named`, a file), else "wrong", "unnamed" or "escaped", with a detail."""
    try:
        got = read()
    except TpufeedError as error:
        text = f"{type(error).__name__}: {error}"
        return ("named" if named in str(error) else "unnamed"), text[:400]
    except Exception as error:  # noqa: BLE001 - what the suite looks for
        return "escaped", f"{type(error).__name__}: {str(error)[:400]}"
    if got == expected:
        return "right", f"{len(got)} records"
    differ = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), None)
    return "wrong", f"{len(got)} records, {len(expected)} expected; first difference at {differ}"


def temporaries(*folders: Path) -> list[str]:
    """Temporary files under `folders` (a writer's, a download's part)."""
    found = []
    for folder in folders:
        for root, _, names in os.walk(folder):
            found += [os.path.join(root, n) for n in names if any(m in n for m in TEMPORARY_MARKS)]
    return found


def left_behind(*folders: Path, wait_s: float = 5.0) -> list[str]:
    """Temporary files under `folders` that stay: one in flight (a read-ahead thread re-posts
    its plan every 20 ms, through a temporary) is gone within `wait_s`."""
    deadline = time.monotonic() + wait_s
    while (found := temporaries(*folders)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


SERVERS = ("gcp_storage_emulator", "moto", "tpufeed-forksrv", "tpufeed.run.workers.forkserver")


def own_processes() -> set[int]:
    """This process's live children, the fork server (it outlives iterators by design) and the
    test servers (they live for the session) aside."""
    found = set()
    for child in psutil.Process().children(recursive=True):
        try:
            line = " ".join([child.name(), *child.cmdline()])
            if child.status() != psutil.STATUS_ZOMBIE and not any(s in line for s in SERVERS):
                found.add(child.pid)
        except psutil.NoSuchProcess:
            continue
    return found


def open_under(folder: Path, wait_s: float = 5.0) -> list[str]:
    """Files under `folder` this process still has open once what used them is let go (a
    read-ahead thread that lets go of its files when idle has `wait_s`)."""
    deadline, found = time.monotonic() + wait_s, []
    while True:
        gc.collect()
        found = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/self/fd/{fd}")
                if target.startswith(f"{folder}/"):
                    found.append(target)
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def no_leftovers(folder: Path) -> Iterator[None]:
    """The body of a fixture: after the case, no temporary under `folder` and no file there
    still open, no process it started still running and no shared-memory segment of this
    process."""
    before = own_processes()
    yield
    left = left_behind(folder)
    assert not left, f"temporary files left: {left}"
    held = open_under(folder)
    assert not held, f"files still open once the datasets were let go: {held}"
    started = own_processes() - before
    for pid in started:  # a worker may take a moment to go once its iterator closed
        try:
            psutil.Process(pid).wait(timeout=5)
        except (psutil.NoSuchProcess, psutil.TimeoutExpired):
            pass
    left = own_processes() - before
    assert not left, f"processes left running: {[psutil.Process(p).cmdline() for p in left]}"
    segments = glob.glob(f"/dev/shm/tpufeed-{os.getpid()}-*")
    assert not segments, f"shared memory left: {segments}"


@contextlib.contextmanager
def full_disk(path: Path, size: str = "1m") -> Iterator[Path]:
    """A small tmpfs mounted at `path` (root may mount here) and filled to its last byte, for
    the folders the case makes in it first (`path` is yielded); unmounted after. Fails, never
    skips, if it cannot be mounted."""
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True
    )
    if done.returncode != 0:
        raise AssertionError(
            "a full disk needs a small tmpfs, and `mount -t tmpfs` was refused: "
            f"{done.stderr.decode(errors='replace').strip()} (run the suite as root)"
        )
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)


def fill(path: Path) -> None:
    """Fills the disk under the folder `path` to its last byte."""
    fd = os.open(path / ".filler", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        while True:
            try:
                if os.write(fd, bytes(64 << 10)) == 0:
                    return
            except OSError as error:
                if error.errno == errno.ENOSPC:
                    return
                raise
    finally:
        os.close(fd)
