"""Hosts' trace files merged into one: a process group per host ("host N: hostname (pid P)"),
each host's processes and threads as tracks inside it, every event on process 0's clock.

Two passes over each file, in bounded memory whatever the files' length (`TraceReader` holds
one event at a time): the first checks the whole file and reads its metadata, its tracks and
its earliest event, so that a bad file fails before anything is written; the second streams
its events, shifted, into the output. What is kept between the passes is per track, not per
event. The output is written under a temporary name and renamed when whole, so a failed merge
leaves no file, whole or half.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tpufeed.cli.trace.alignment import Placement, alignment, check_distinct, host_numbers, place
from tpufeed.cli.trace.reader import TraceReader
from tpufeed.errors import CorruptDataError, InvalidArgumentError
from tpufeed.storage.opener import FileIdentity

__all__ = ["MAX_TRACKS", "Scanned", "merge", "scan"]

MAX_TRACKS = 65_536  # threads of one file: more is no trace tpufeed (or a profiler) writes


@dataclass
class Scanned:
    """What the first pass learns of a file."""

    placement: Placement
    identity: FileIdentity
    events: int = 0
    first_ts: float | None = None  # microseconds: its earliest event
    last_ts: float | None = None  # microseconds: its latest event's end
    processes: dict[Any, str] = field(default_factory=dict)  # pid -> name
    threads: dict[tuple[Any, Any], int] = field(default_factory=dict)  # (pid, tid) -> new tid
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)
    dropped: int = 0


def scan(path: str) -> Scanned:
    """The first pass over `path`: every event checked, the tracks and the metadata read."""
    reader = TraceReader(path)
    threads: dict[tuple[Any, Any], int] = {}
    processes: dict[Any, str] = {}
    thread_names: dict[tuple[Any, Any], str] = {}
    events, first, last = 0, math.inf, -math.inf
    for index, event in enumerate(reader.events()):
        phase = event.get("ph")
        if not isinstance(phase, str):
            raise _bad_event(path, index, "has no 'ph' (its phase) string")
        track = (_key(event.get("pid")), _key(event.get("tid")))
        if phase == "M":
            name = _meta_name(event)
            if event.get("name") == "process_name" and name is not None:
                processes[track[0]] = name
            elif event.get("name") == "thread_name" and name is not None:
                thread_names[track] = name
            continue
        ts = _timestamp(event, path, index)
        first, last = min(first, ts), max(last, ts + _duration(event))
        if track not in threads:
            if len(threads) >= MAX_TRACKS:
                raise _bad_event(path, index, f"is on a track past the {MAX_TRACKS:,}th")
            threads[track] = len(threads) + 1
        events += 1
    placed = place(path, reader.other)
    data = reader.other.get("otherData")
    dropped = data.get("dropped_events", 0) if isinstance(data, dict) else 0
    return Scanned(
        placed,
        reader.identity,
        events,
        None if events == 0 else first,
        None if events == 0 else last,
        processes,
        threads,
        thread_names,
        dropped if isinstance(dropped, int) and not isinstance(dropped, bool) else 0,
    )


def merge(paths: list[str], output: str) -> dict[str, Any]:
    """Merges `paths` (one trace file per host) into `output`; what was merged and how close
    (the `tpufeed.trace.merge` document, less its schema)."""
    if not paths:
        raise InvalidArgumentError("trace merge needs at least one trace file")
    _refuse_output_among(paths, output)
    scanned = [scan(path) for path in paths]
    placements = [s.placement for s in scanned]
    check_distinct(placements)
    numbers = host_numbers(placements)
    origins = _origins(scanned)
    hosts = [_host_record(s, n, o) for s, n, o in zip(scanned, numbers, origins)]
    aligned = alignment(placements, numbers, [s.last_ts for s in scanned])
    other = {
        "producer": "tpufeed trace merge",
        "dropped_events": sum(s.dropped for s in scanned),  # by the hosts' rings, not here
        "alignment": aligned,
        "hosts": hosts,
    }
    _write(Path(output), scanned, numbers, origins, other)
    return {
        "output": output,
        "hosts": hosts,
        "events": sum(s.events for s in scanned),
        "alignment": aligned,
    }


def _origins(scanned: list[Scanned]) -> list[int]:
    """Each file's ts 0 in nanoseconds from the merged trace's start (its earliest event): a
    file with no clock starts there too."""
    starts = [
        s.placement.origin_ns + _ns(s.first_ts or 0.0)
        for s in scanned
        if s.placement.origin_ns is not None
    ]
    zero = min(starts, default=0)
    return [
        s.placement.origin_ns - zero
        if s.placement.origin_ns is not None
        else -_ns(s.first_ts or 0.0)
        for s in scanned
    ]


def _host_record(s: Scanned, number: int, origin_ns: int) -> dict[str, Any]:
    p = s.placement
    return {
        "host": number,
        "file": p.path,
        "hostname": p.hostname,
        "pid": p.pid,
        "aligned_by": p.how,
        "offset_ns": p.offset_ns,
        "error_ns": p.error_ns,
        "shift_us": origin_ns / 1000,
        "events": s.events,
        "dropped_events": s.dropped,
        "note": p.note,
    }


def _write(
    output: Path,
    scanned: list[Scanned],
    numbers: list[int],
    origins: list[int],
    other: dict[str, Any],
) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    staging = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    try:
        with open(staging, "w", encoding="utf-8") as out:
            out.write('{"traceEvents":[\n')
            first = True
            for s, number, origin in sorted(zip(scanned, numbers, origins), key=lambda x: x[1]):
                first = _write_host(out, s, number, origin, first)
            out.write('\n],"displayTimeUnit":"ms","otherData":')
            out.write(json.dumps(other, separators=(",", ":")))
            out.write("}\n")
        os.replace(staging, output)
    except BaseException:  # a bad file found late, a full disk, Ctrl-C: nothing stays
        staging.unlink(missing_ok=True)
        raise


def _write_host(out: TextIO, s: Scanned, number: int, origin_ns: int, first: bool) -> bool:
    """One host's group: its name, its tracks' names, then its events (the second pass)."""
    group = number + 1  # pid 0 is the idle process to some viewers
    p = s.placement
    who = f"{p.hostname} (pid {p.pid})" if p.hostname is not None else Path(p.path).name
    meta: list[dict[str, Any]] = [
        {
            "ph": "M",
            "name": "process_name",
            "pid": group,
            "args": {"name": f"host {number}: {who}"},
        },
        {"ph": "M", "name": "process_sort_index", "pid": group, "args": {"sort_index": number}},
    ]
    for (pid, tid), new in s.threads.items():
        process = s.processes.get(pid, "process")
        thread = s.thread_names.get((pid, tid), f"thread {tid}")
        name = f"{process} (pid {pid}): {thread}"
        meta.append(
            {"ph": "M", "name": "thread_name", "pid": group, "tid": new, "args": {"name": name}}
        )
    first = _dump(out, meta, first)
    pending: list[dict[str, Any]] = []  # written 4,096 events at a time
    for event in _shifted(s, group, origin_ns / 1000):
        pending.append(event)
        if len(pending) >= 4096:
            first = _dump(out, pending, first)
    return _dump(out, pending, first)


def _shifted(s: Scanned, group: int, shift_us: float) -> Iterator[dict[str, Any]]:
    """The file's events (the second pass), on the host's group and tracks, shifted."""
    for event in TraceReader(s.placement.path, pinned=s.identity).events():
        if event.get("ph") == "M":
            continue
        track = (_key(event.get("pid")), _key(event.get("tid")))
        event["pid"], event["tid"] = group, s.threads[track]
        event["ts"] = round(event["ts"] + shift_us, 3)
        yield event


def _dump(out: TextIO, events: list[dict[str, Any]], first: bool) -> bool:
    if events:
        text = json.dumps(events, separators=(",", ":"), allow_nan=False)[1:-1]  # one call
        out.write(text if first else ",\n" + text)
        events.clear()
        return False
    return first


def _refuse_output_among(paths: list[str], output: str) -> None:
    """Refuses a file given twice, and an output that is one of the inputs or a folder."""
    given: dict[str, str] = {}
    for path in paths:
        real = os.path.realpath(path)
        if real in given:
            raise InvalidArgumentError(
                f"{path} is given twice (as {given[real]} too): give each host's file once"
            )
        given[real] = path
    target = os.path.realpath(output)
    for path in paths:
        if os.path.realpath(path) == target:
            raise InvalidArgumentError(
                f"-o {output} is one of the files to merge ({path}): name another output file"
            )
    if os.path.isdir(output):
        raise InvalidArgumentError(f"-o {output} is a folder: name a file in it")


def _key(value: Any) -> Any:
    """A pid or tid as a dict key (a list or object in its place is kept as its text)."""
    return value if isinstance(value, (int, str)) or value is None else json.dumps(value)


def _meta_name(event: dict[str, Any]) -> str | None:
    args = event.get("args")
    name = args.get("name") if isinstance(args, dict) else None
    return name if isinstance(name, str) else None


def _timestamp(event: dict[str, Any], path: str, index: int) -> float:
    ts = event.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
        raise _bad_event(path, index, f"has ts {ts!r}, not a finite number of microseconds")
    return float(ts)


def _duration(event: dict[str, Any]) -> float:
    """A complete event's duration (0 for others, and for one that is not a finite number)."""
    duration = event.get("dur", 0)
    if isinstance(duration, bool) or not isinstance(duration, (int, float)):
        return 0.0
    return float(duration) if math.isfinite(duration) and duration > 0 else 0.0


def _ns(microseconds: float) -> int:
    return round(microseconds * 1000)


def _bad_event(path: str, index: int, why: str) -> CorruptDataError:
    return CorruptDataError(f"{path}: trace event {index} {why}", path=path, record=index)
