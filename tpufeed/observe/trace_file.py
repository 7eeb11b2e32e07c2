"""A timeline recorded into a file: `tpufeed.trace(path)` around a block, or
`options(trace=path)` for one iterator.

One timeline records in a process at a time. Whoever starts recording while one already records
joins it: its file then holds everything that timeline holds (the other recorder's events
included, from when that one began), and the recording goes on until the last one that joined
has left. The capacity is the one of whoever started it.

The file is written when the recording ends: after the run, often on the way out of a `finally`
or an iterator's close. A file that cannot be written then (a full disk, its folder gone) gives
a warning naming it and why, and no file, half-written or staging, is left; the run's own
outcome, its items or its error, is untouched. A path that cannot be written at all is refused
before anything is recorded.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tpufeed.errors import InvalidArgumentError
from tpufeed.observe import timeline
from tpufeed.observe.timeline import CAPACITY, Timeline


def trace_path(path: object, what: str = "trace") -> Path:
    """`path` as a Path; an error naming it unless it is a str or os.PathLike of one."""
    if isinstance(path, (str, os.PathLike)):
        text = os.fspath(path)
        if isinstance(text, str) and text:
            return Path(text)
    raise InvalidArgumentError(
        f"{what} must be a file path (a non-empty str or os.PathLike), got {path!r}"
    )


def _writable(path: Path) -> Path:
    """`path`, its folder made: checked before anything is recorded, so a path that cannot be
    written fails now, not after the whole run it was to record."""
    if path.is_dir():
        raise InvalidArgumentError(f"trace file {path} is a folder: name a file in it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InvalidArgumentError(
            f"cannot make the folder of trace file {path}: {error.strerror or error}"
        ) from None
    if not os.access(path.parent, os.W_OK):
        raise InvalidArgumentError(f"cannot write trace file {path}: its folder is not writable")
    return path


class TraceFile:
    """The recording behind one trace file: `begin()` joins (or starts) the process's timeline,
    `write()` writes all it holds so far, `end()` writes and leaves. `begin()` again after
    `end()` records on into the same timeline, so each write holds all before it."""

    def __init__(self, path: str | os.PathLike[str], capacity: int = CAPACITY):
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise InvalidArgumentError(
                f"trace capacity must be a positive int (events kept), got {capacity!r}"
            )
        self.path, self.capacity = _writable(trace_path(path)), capacity
        self.timeline: Timeline | None = None
        self.recording = False

    def begin(self) -> Timeline:
        if not self.recording or self.timeline is None:
            self.timeline = timeline.join(self.capacity, self.timeline)
            self.recording = True
        return self.timeline

    def write(self) -> Path | None:
        """Writes the file (replacing an earlier write); None if nothing was recorded yet, or
        if it cannot be written (a warning says why; nothing is left of it)."""
        if self.timeline is None:
            return None
        try:
            return self.timeline.write(self.path)
        except OSError as error:
            warnings.warn(
                f"trace file {self.path} could not be written ({error.strerror or error}); the "
                "run is not affected, only its timeline is lost. Free space there, or name "
                "another file",
                stacklevel=3,
            )
            return None

    def end(self) -> Path | None:
        if self.recording and self.timeline is not None:
            self.recording = False
            timeline.leave(self.timeline)
        return self.write()


@contextmanager
def trace(path: str | os.PathLike[str], capacity: int = CAPACITY) -> Iterator[Timeline]:
    """Records a timeline of every tpufeed process of this host during the block, and writes
    it to `path` on leaving it (an error in the block included): a Chrome trace-event JSON file
    that opens in https://ui.perfetto.dev and chrome://tracing.

    Tracks: the consumer's thread (`next` waits, the stream stages `batch`/`pack`/`mix`, the
    `transfer` of workers' answers), the prefetch thread's stages, and one process per worker
    (`tpufeed worker N`: a `chunk` span per task, its stages inside). Workers record when the
    iterator starts inside the block. `capacity` bounds the events kept (the last ones; the
    file's `otherData.dropped_events` counts the others).

    In a multi-host run (jax.distributed or torch.distributed), record on every host, each
    into its own file: each host measures its clock's offset to process 0's when its first
    iterator starts in the block (once, on a thread) and keeps it in its file, and
    `tpufeed trace merge host*.json -o pod.json` makes one trace of them, a group per host,
    on process 0's clock.

    >>> with tpufeed.trace("run.json"):                  # doctest: +SKIP
    ...     for batch in ds.workers(2):
    ...         train_step(batch)
    """
    recorder = TraceFile(path, capacity)
    recorded = recorder.begin()
    try:
        yield recorded
    finally:
        recorder.end()
