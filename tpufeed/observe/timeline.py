"""A bounded timeline of what every process of a host's input did, as trace events.

While a `Timeline` is recording (`tpufeed.trace(path)`, or `options(trace=path)` for one
iterator), the hooks below add events to it: `span` around work, `complete` for work already
timed (a stage's seconds), `instant` for a moment (a retry, an eviction). Workers record into
their own timeline and ship its events with their answers; the parent adds them, under the
worker's pid, to its own. `write` makes one Chrome / Perfetto trace-event JSON file with a
track per process and thread: it opens in https://ui.perfetto.dev and in chrome://tracing.

The timeline is a ring: it keeps the last `capacity` events (200,000 by default, about 40 MB);
older ones are dropped, and the file says how many (`"dropped_events"` in its metadata).

Times are `time.perf_counter_ns()`: CLOCK_MONOTONIC on Linux, one clock for every process of
the host, so the workers' events line up with the parent's. The file's metadata places that
clock among the hosts' (`tpufeed trace merge`): the host's name and pid, the wall-clock time of
the recording's start (`clock`), and, in a multi-host run, the offset to process 0's clock
measured through the store the hosts share (`pod_clock`, `tpufeed.observe.pod_clock`).

Off, each hook is one read of a module global.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tpufeed.observe import pod_clock

CAPACITY = 200_000

# (name, category, start_ns, duration_ns or -1 for an instant, pid, thread name, args or None)
Event = tuple[str, str, int, int, int, str, Any]

_ns = time.perf_counter_ns


class Timeline:
    """The ring of events of one recording, and the names of its processes."""

    def __init__(self, capacity: int = CAPACITY):
        if capacity < 1:
            raise ValueError(f"a timeline keeps at least 1 event, not {capacity}")
        self.capacity = capacity
        self.events: deque[Event] = deque(maxlen=capacity)
        self.added = 0  # events ever added: those beyond `capacity` were dropped
        self.processes: dict[int, str] = {os.getpid(): "tpufeed consumer"}
        self.started_ns = _ns()
        self.started_unix_ns = time.time_ns()  # the same moment on the wall clock

    def add(self, event: Event) -> None:
        self.events.append(event)  # deque.append is atomic: threads add without a lock
        self.added += 1

    def extend(self, events: list[Event]) -> None:
        self.events.extend(events)
        self.added += len(events)

    def name_process(self, pid: int, name: str) -> None:
        self.processes[pid] = name

    @property
    def dropped(self) -> int:
        return max(0, self.added - self.capacity)

    def trace_events(self) -> list[dict[str, Any]]:
        """The events in Chrome's trace-event format (microseconds since the recording began),
        with a name for every process and thread track."""
        origin = self.started_ns
        threads: dict[tuple[int, str], int] = {}
        out: list[dict[str, Any]] = []
        for name, category, start, duration, pid, thread, args in list(self.events):
            tid = threads.setdefault((pid, thread), len(threads) + 1)
            event: dict[str, Any] = {
                "name": name,
                "cat": category,
                "ts": (start - origin) / 1000,
                "pid": pid,
                "tid": tid,
            }
            if duration < 0:
                event.update(ph="i", s="t")
            else:
                event.update(ph="X", dur=duration / 1000)
            if args:
                event["args"] = args
            out.append(event)
        meta: list[dict[str, Any]] = []
        for pid in sorted({pid for pid, _ in threads} | set(self.processes)):
            name = self.processes.get(pid, f"tpufeed process {pid}")
            meta.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": name}})
        for (pid, thread), tid in threads.items():
            meta.append(
                {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": thread}}
            )
        return meta + out

    def placement(self) -> dict[str, Any]:
        """Where the recording stands among the pod's: its host, its start on the trace clock
        (ts 0) and the wall clock, and the offset to process 0's clock where one was measured."""
        placed = pod_clock.current()
        return {
            "host": {"hostname": socket.gethostname(), "pid": os.getpid()},
            "clock": {"trace_origin_ns": self.started_ns, "unix_origin_ns": self.started_unix_ns},
            "pod_clock": placed.to_json() if placed is not None else None,
        }

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Writes the trace-event file (atomically: a reader never sees half of it, and one that
        cannot be written, an OSError, leaves no file behind)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        document = {
            "traceEvents": self.trace_events(),
            "displayTimeUnit": "ms",
            "otherData": {
                "producer": "tpufeed",
                "capacity": self.capacity,
                "dropped_events": self.dropped,
                **self.placement(),
            },
        }
        staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            staging.write_text(json.dumps(document, separators=(",", ":")))
            os.replace(staging, path)
        except BaseException:  # a full disk, a folder gone: no half-written file stays
            staging.unlink(missing_ok=True)
            raise
        return path


_recording: Timeline | None = None  # the hooks' one read


def recording() -> Timeline | None:
    """The timeline being recorded in this process, if any."""
    return _recording


def start(capacity: int = CAPACITY) -> Timeline:
    """Starts recording in this process (a nested start keeps the running timeline)."""
    global _recording
    if _recording is None:
        _recording = Timeline(capacity)
    return _recording


def stop() -> Timeline | None:
    """Stops recording; the timeline that was recorded, if any."""
    global _recording
    timeline, _recording = _recording, None
    return timeline


_users = 0  # of the timeline recording now, those that joined it
_joining = threading.Lock()


def join(capacity: int = CAPACITY, resume: Timeline | None = None) -> Timeline:
    """The timeline recording now, joined; if none, starts one (`resume`: that one again).
    It records until every one that joined has left."""
    global _recording, _users
    with _joining:
        if _recording is None:
            _recording, _users = resume if resume is not None else Timeline(capacity), 0
        _users += 1
        return _recording


def leave(timeline: Timeline) -> None:
    """Leaves `timeline`: the last to leave stops the recording."""
    global _recording, _users
    with _joining:
        if _recording is timeline:
            _users -= 1
            if _users <= 0:
                _recording = None


def _thread() -> str:
    return threading.current_thread().name


def complete(name: str, seconds: float, category: str = "stage", args: Any = None) -> None:
    """Work that just ended and took `seconds` (a stage's time for a chunk)."""
    timeline = _recording
    if timeline is not None:
        duration = int(seconds * 1e9)
        timeline.add((name, category, _ns() - duration, duration, os.getpid(), _thread(), args))


def instant(name: str, category: str = "event", args: Any = None) -> None:
    """A moment: a retry, an eviction, an agreement."""
    timeline = _recording
    if timeline is not None:
        timeline.add((name, category, _ns(), -1, os.getpid(), _thread(), args))


@contextmanager
def span(name: str, category: str = "span", args: Any = None) -> Iterator[None]:
    """Work from entering to leaving the block. Costs a generator even when off: in hot
    loops, check `recording()` first or use `complete` with times already taken."""
    timeline = _recording
    if timeline is None:
        yield
        return
    started = _ns()
    try:
        yield
    finally:
        timeline.add((name, category, started, _ns() - started, os.getpid(), _thread(), args))


def drain() -> list[Event]:
    """The events recorded since the last drain (what a worker ships with an answer)."""
    timeline = _recording
    if timeline is None or not timeline.events:
        return []
    events = list(timeline.events)
    timeline.events.clear()
    return events
