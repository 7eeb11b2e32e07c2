"""Where each host's trace file lies on the pod's clock, and how close the files are aligned.

A file's events are in microseconds from its recording's start (ts 0). Its metadata places that
start (`tpufeed.observe.timeline`): `clock` holds it on the host's trace clock and on its wall
clock; `pod_clock`, in a multi-host run, the host's offset to process 0's trace clock (within
`error_ns`) and process 0's wall clock minus its trace clock. So ts 0 lies, in nanoseconds on
process 0's wall clock, at

    trace_origin_ns - offset_ns + reference_unix_ns         (a measured offset)
    unix_origin_ns                                          (no offset: its own wall clock)

and nowhere known for a file without `clock` (older files, other programs): it is put at the
pod's start, and said to be unaligned. These are pure functions of the files' metadata.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tpufeed.errors import CorruptDataError, InvalidArgumentError

__all__ = ["Placement", "alignment", "check_distinct", "host_numbers", "place"]

OFFSET, WALL_CLOCK, NONE = "measured offset", "wall clock only", "not aligned"
DRIFT_SAID_S = 10.0  # from a measurement to the last events: the statement warns of drift


@dataclass(frozen=True)
class Placement:
    """One file's place: `origin_ns` is its ts 0 in nanoseconds on the pod's clock (None where
    unknown), `how` says by what (`OFFSET`, `WALL_CLOCK` or `NONE`)."""

    path: str
    how: str
    origin_ns: int | None = None
    hostname: str | None = None
    pid: int | None = None
    index: int | None = None
    count: int | None = None
    offset_ns: int | None = None
    error_ns: int | None = None
    run: str | None = None
    service: str | None = None
    note: str | None = None
    recorded_unix_ns: int | None = None  # the recording's start on its wall clock
    measured_ns: int | None = None  # when the offset was measured, in ns from ts 0


def place(path: str, other: Mapping[str, Any]) -> Placement:
    """The place of the file at `path` from its top-level keys other than traceEvents."""
    data = _object(other.get("otherData"), path, "otherData")
    host = _object(data.get("host"), path, "otherData.host")
    clock = _object(data.get("clock"), path, "otherData.clock")
    pod = _object(data.get("pod_clock"), path, "otherData.pod_clock")
    named = {
        "hostname": _typed(host.get("hostname"), str, path, "otherData.host.hostname"),
        "pid": _whole(host.get("pid"), path, "otherData.host.pid"),
        "index": _whole(pod.get("process_index"), path, "otherData.pod_clock.process_index"),
        "count": _whole(pod.get("process_count"), path, "otherData.pod_clock.process_count"),
        "run": _typed(pod.get("run"), str, path, "otherData.pod_clock.run"),
        "service": _typed(pod.get("service"), str, path, "otherData.pod_clock.service"),
        "note": _typed(pod.get("note"), str, path, "otherData.pod_clock.note"),
    }
    trace_origin = _whole(clock.get("trace_origin_ns"), path, "otherData.clock.trace_origin_ns")
    unix_origin = _whole(clock.get("unix_origin_ns"), path, "otherData.clock.unix_origin_ns")
    offset = _whole(pod.get("offset_ns"), path, "otherData.pod_clock.offset_ns")
    error = _whole(pod.get("error_ns"), path, "otherData.pod_clock.error_ns")
    reference = _whole(pod.get("reference_unix_ns"), path, "otherData.pod_clock.reference_unix_ns")
    measured = _whole(pod.get("measured_at_ns"), path, "otherData.pod_clock.measured_at_ns")
    if error is not None and error < 0:
        raise _bad(path, "otherData.pod_clock.error_ns", error, "a bound is never negative")
    if None not in (trace_origin, offset, error, reference):
        origin = trace_origin - offset + reference  # type: ignore[operator]
        since = None if measured is None else measured - trace_origin  # type: ignore[operator]
        return Placement(
            path, OFFSET, origin, offset_ns=offset, error_ns=error, measured_ns=since, **named
        )
    if unix_origin is not None:
        return Placement(path, WALL_CLOCK, unix_origin, recorded_unix_ns=unix_origin, **named)
    return Placement(path, NONE, **named)


def check_distinct(placements: Sequence[Placement]) -> None:
    """Refuses one host twice: the same process index of one run, or the same process (its
    host name and pid) in two files."""
    seen: dict[tuple[Any, ...], str] = {}
    for p in placements:
        keys = []
        if p.index is not None and p.run is not None:
            keys.append(("run", p.run, p.index))
        if p.hostname is not None and p.pid is not None:
            keys.append(("process", p.hostname, p.pid))
        for key in keys:
            if key in seen:
                who = f"process {p.index} of one run" if key[0] == "run" else f"{p.hostname} pid"
                who += "" if key[0] == "run" else f" {p.pid}"
                raise InvalidArgumentError(
                    f"{seen[key]} and {p.path} are the same host ({who}): give one trace file "
                    "per host (the file of each host's process)"
                )
            seen[key] = p.path


def host_numbers(placements: Sequence[Placement]) -> list[int]:
    """Each file's host number: its process index where the file records one and no file
    before it took that number (files of several runs), else the next number after all
    recorded ones, in the order the files were given."""
    known = {p.index for p in placements if p.index is not None}
    following = max(known, default=-1) + 1
    taken: set[int] = set()
    numbers = []
    for p in placements:
        if p.index is not None and p.index not in taken:
            numbers.append(p.index)
        else:
            numbers.append(following)
            following += 1
        taken.add(numbers[-1])
    return numbers


def alignment(
    placements: Sequence[Placement], numbers: Sequence[int], ends_us: Sequence[float | None]
) -> dict[str, Any]:
    """How close the merged files are: the largest bound of the measured offsets, how long
    after a measurement the last events came (`ends_us`: each file's, from its ts 0), and the
    files aligned by wall clock only, or not at all, with why."""
    measured = [(p.error_ns or 0, n) for p, n in zip(placements, numbers) if p.how == OFFSET]
    worst_ns, worst_host = max(measured, default=(None, None))
    found = {
        "max_error_ns": worst_ns,
        "max_error_host": worst_host,
        "wall_clock_only": [n for p, n in zip(placements, numbers) if p.how == WALL_CLOCK],
        "not_aligned": [n for p, n in zip(placements, numbers) if p.how == NONE],
        "runs": len({p.run for p in placements if p.how == OFFSET}),
        "drift_span_s": _drift_span_s(placements, ends_us),
    }
    service = next((p.service for p in placements if p.how == OFFSET), None)
    return {**found, "statement": "; ".join(_statement(found, len(measured), service))}


def _statement(found: dict[str, Any], measured: int, service: str | None) -> list[str]:
    """What `alignment` found, in words."""
    lines = []
    if measured:
        lines.append(
            f"within ±{_ms(found['max_error_ns'])} of process 0's clock for the {measured} hosts "
            f"with a measured offset (the largest bound, host {found['max_error_host']}'s: half "
            f"its shortest round trip through {service})"
        )
        span_s = found["drift_span_s"]
        if span_s is not None and span_s >= DRIFT_SAID_S:
            lines.append(
                f"the offsets were measured up to {span_s:,.0f} s before the hosts' last events: "
                "clocks drift apart after a measurement by their frequency difference (a few µs "
                "a second at most under NTP), which the bound leaves out"
            )
        if found["runs"] > 1:
            lines.append(
                f"these files come from {found['runs']} runs: each run's hosts are aligned by "
                "their offsets, the runs to each other by their process 0's wall clocks only"
            )
    if found["wall_clock_only"]:
        lines.append(
            f"{_hosts(found['wall_clock_only'])} no measured offset (a single-host run, or the "
            "measurement failed: see hosts[].note): aligned by wall clock only, as close as the "
            "hosts' clocks are (NTP: often within milliseconds), which no file can tell"
        )
    if found["not_aligned"]:
        lines.append(
            f"{_hosts(found['not_aligned'])} no clock (written by tpufeed 0.2.0 or older, or by "
            "another program): each starts at the pod's start; not aligned"
        )
    return lines


def _drift_span_s(placements: Sequence[Placement], ends_us: Sequence[float | None]) -> float | None:
    """The longest time from a host's measurement to its last event, in seconds."""
    spans = [
        (end * 1000 - p.measured_ns) / 1e9
        for p, end in zip(placements, ends_us)
        if p.how == OFFSET and p.measured_ns is not None and end is not None
    ]
    return max(spans, default=None)


def _ms(ns: int | None) -> str:
    return f"{(ns or 0) / 1e6:.3f} ms"


def _hosts(numbers: list[int]) -> str:
    """`host 3 carries` or `hosts 1, 2 carry`."""
    listed = ", ".join(map(str, numbers))
    return f"host {listed} carries" if len(numbers) == 1 else f"hosts {listed} carry"


def _object(value: Any, path: str, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _bad(path, where, value, "not an object")
    return value


def _typed(value: Any, kind: type, path: str, where: str) -> Any:
    if value is not None and not isinstance(value, kind):
        raise _bad(path, where, value, f"not a {kind.__name__}")
    return value


def _whole(value: Any, path: str, where: str) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise _bad(path, where, value, "not a whole number")
    return value


def _bad(path: str, where: str, value: Any, why: str) -> CorruptDataError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return CorruptDataError(f"{path}: {where} is {shown}: {why}", path=path)
