"""Where a pipeline is stuck: `Beacon`s, and the error when `options(timeout_s=...)` fires.

With a timeout set, the code that runs chunks marks each stage and record it starts on a
`Beacon` (in a worker: a few bytes of memory shared with the parent). When `next()` has waited
`timeout_s`, the iterator reads the beacon of whoever is making the item it waits for, and the
error names the stage, the record and how long it has been there. A worker also marks each task
it takes on its beacon, timeout or not (once a task), so the error for a worker that dies or
stops names the chunk it was making.
"""

from __future__ import annotations

import mmap
import os
import time
from typing import Any

import numpy as np

from tpufeed.errors import InputTimeoutError
from tpufeed.ops.base import stage_names
from tpufeed.run.resources import SHM_DIR

BEACON_BYTES = 32  # stage index, record, since (monotonic seconds), task; float64 each
_IDLE = -1.0
_READ = "read"


class Beacon:
    """The stage (by index in `labels`) and the record being worked on, since when, and the
    task (a worker's: the last it took)."""

    def __init__(self, labels: list[str], buffer: Any = None):
        self.labels = labels
        self._index = {label: i for i, label in enumerate(labels)}
        self._cells = (
            np.full(4, _IDLE) if buffer is None else np.ndarray(4, np.float64, buffer=buffer)
        )

    def at(self, label: str, record: int) -> None:
        cells = self._cells
        cells[1] = record
        cells[2] = time.monotonic()
        cells[0] = self._index[label]

    def idle(self) -> None:
        self._cells[0] = _IDLE

    def taken(self, task_id: int) -> None:
        """Marks the task this worker has taken, before it makes anything of it."""
        self._cells[3] = task_id

    def task(self) -> int | None:
        """The task last taken, or None before the first."""
        task = float(self._cells[3])
        return None if task < 0 else int(task)

    def where(self) -> tuple[str, int, float] | None:
        """(stage, record, seconds there), or None when idle."""
        stage, record, since = (float(c) for c in self._cells[:3])
        if stage < 0:
            return None
        return self.labels[int(stage)], int(record), time.monotonic() - since


def labels_of(plan: Any) -> list[str]:
    """Every label a chunk runner of `plan` marks, in a fixed order (both sides compute it)."""
    return [_READ, *stage_names(plan.head), "batch", *stage_names(plan.tail, " on batches")]


def beacon_file(count: int) -> int:
    """An unlinked file for `count` idle beacons (an fd to pass to workers; nothing to clean
    up)."""
    path = os.path.join(SHM_DIR, f"tpufeed-{os.getpid()}-beacons-{os.urandom(4).hex()}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.unlink(path)
    os.write(fd, np.full(BEACON_BYTES // 8 * max(1, count), _IDLE).tobytes())
    return fd


def beacon_map(fd: int, count: int) -> mmap.mmap:
    return mmap.mmap(fd, max(1, count) * BEACON_BYTES)


def beacon_at(memory: mmap.mmap, index: int, labels: list[str]) -> Beacon:
    return Beacon(labels, memoryview(memory)[index * BEACON_BYTES : (index + 1) * BEACON_BYTES])


def timed_out(timeout_s: float, who: str, beacon: Beacon | None, names: Any) -> InputTimeoutError:
    """The error for `next()` having waited `timeout_s` on `who` (a worker, or the prefetch
    thread), naming what its beacon says it is doing."""
    where = beacon.where() if beacon is not None else None
    if where is None:
        doing = "was between records (reading ahead or handing over)"
        record = None
    else:
        stage, record, seconds = where
        what = (
            f"reading {names.describe(record)}"
            if stage == _READ
            else f"in {stage} on {names.describe(record)}"
        )
        doing = f"has been {what} for {seconds:.1f} s"
    return InputTimeoutError(
        f"no item within timeout_s={timeout_s:g}: {who} {doing}. The pipeline is stopped; a "
        "transform that can hang needs its own timeout, or a larger timeout_s "
        "(Dataset.options). Resume from the last get_state() with a new iterator.",
        stage=where[0] if where else None,
        record=record,
        path=names.path_of(record) if record is not None else None,
    )
