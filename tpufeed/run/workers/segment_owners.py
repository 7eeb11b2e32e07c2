"""Shared-memory segments named by their owner, and the sweep that removes those of owners gone.

Workers hand batches over in files in /dev/shm (`slots.py`), each unlinked as soon as the
iterator's process maps it, and every file of an iterator is removed when it closes or fails. A
job killed whole (SIGKILL to the iterator's process and its workers together, the OOM killer
taking the group, a container stopped hard) runs none of that, and tmpfs keeps the files until
the machine reboots. So each name starts with its owner, the process whose iterator maps it:
`tpufeed-PID-START-NS-`, its pid, its start time (clock ticks since boot: with the pid, one
process for as long as the machine runs) and its pid namespace. The next run on the host
removes the segments of owners that are gone (`remove_orphans`): its fork server as it starts,
before it forks a worker (or, without a fork server, its first iterator with workers).

An owner is gone when no process has its pid, or the one that has it started at another time
(the pid was reused), or it is a zombie. Segments of another pid namespace (another container
that shares this /dev/shm) are left alone: their owner cannot be seen from here.
"""

from __future__ import annotations

import os
import re

from tpufeed.run.resources import SHM_DIR
from tpufeed.run.workers.liveness import process_state, start_time

_OWNED = re.compile(r"tpufeed-(\d+)-(\d+)-(\d+)-")
_tags: dict[int, str] = {}  # pid -> its tag (a fork has another pid, so another tag)


def owner_tag() -> str:
    """`tpufeed-PID-START-NS`: how the name of every segment this process owns begins."""
    pid = os.getpid()
    tag = _tags.get(pid)
    if tag is None:
        tag = _tags[pid] = f"tpufeed-{pid}-{start_time(pid) or 0}-{_namespace()}"
    return tag


def _namespace() -> int:
    """This process's pid namespace (the inode of /proc/self/ns/pid); 0 where it cannot be
    read (no /proc): then no owner can be checked, and nothing is swept."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def owner_alive(pid: int, started: int) -> bool:
    """Whether the process that owned segments as (`pid`, `started`) still runs."""
    return process_state(pid) not in ("", "Z", "X") and start_time(pid) == started


def remove_orphans(directory: str = SHM_DIR) -> list[str]:
    """Removes the segments in `directory` whose owner is gone (see the module's docstring);
    returns their paths. One listing, and one look at /proc per owner."""
    namespace = _namespace()
    try:
        names = os.listdir(directory) if namespace else []
    except OSError:
        return []
    alive: dict[tuple[int, int], bool] = {}
    removed = []
    for name in names:
        owned = _OWNED.match(name)
        if owned is None or int(owned[3]) != namespace:
            continue
        owner = (int(owned[1]), int(owned[2]))
        if owner not in alive:
            alive[owner] = owner_alive(*owner)
        if alive[owner]:
            continue
        path = os.path.join(directory, name)
        try:
            os.unlink(path)
        except OSError:  # gone already, or not ours to remove (another user's, sticky /dev/shm)
            continue
        removed.append(path)
    return removed
