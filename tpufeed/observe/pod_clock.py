"""This process's place on the pod's clock: its host index, and its trace clock's offset to
process 0's as measured through the store the hosts share (`tpufeed.run.hosts.clock_offset`).

A timeline's file carries it in its metadata (`otherData.pod_clock`), so that `tpufeed trace
merge` can put every host's events on process 0's clock and say how close they are. The
measurement runs on a thread of its own; a file written while it runs waits for it at most
`WRITE_WAIT_S`, then is written without an offset (a warning says why).
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["WRITE_WAIT_S", "PodClock", "begin", "current", "given_up", "settle"]

WRITE_WAIT_S = 10.0  # the longest a trace file's write waits for a measurement in flight


@dataclass(frozen=True)
class PodClock:
    """Where this process stands among the hosts, on the trace clock (`perf_counter_ns`).

    `offset_ns`: this host's trace clock minus process 0's, None where not measured (one host,
    or no answer: `note` says why); the true offset lies within `error_ns` of it (half the
    round trip that measured it). `reference_unix_ns`: process 0's wall clock minus its trace
    clock, so that every host's events land on process 0's wall clock. `run`: a token process
    0 made for this measurement, the same in every host's file of one run. `measured_at_ns`:
    this host's trace clock when it was measured (the bound holds then; the clocks drift apart
    after it by their frequency difference)."""

    process_index: int
    process_count: int
    offset_ns: int | None = None
    error_ns: int | None = None
    reference_unix_ns: int | None = None
    run: str | None = None
    service: str | None = None
    rounds: int = 0
    note: str | None = None
    measured_at_ns: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_lock = threading.Lock()
_clock: PodClock | None = None
_measuring: threading.Event | None = None  # set when the measurement in flight ends
_given_up: threading.Event | None = None  # set when a trace file stopped waiting for it
_claimed: object | None = None  # what the measurement is for (the runtime's client)


def begin(owner: object) -> bool:
    """Claims the measurement for `owner` (a runtime's client: one measurement each): True if
    the caller is to measure now, False if it was measured, or is being measured, for it."""
    global _measuring, _claimed, _given_up
    with _lock:
        if _claimed is owner:
            return False
        _claimed, _measuring, _given_up = owner, threading.Event(), threading.Event()
        return True


def given_up() -> bool:
    """Whether a trace file was written without the measurement in flight: it then stops at
    its next check, its threads gone long before the process exits (a thread still inside
    a store's native client as Python finalises aborts the process)."""
    return _given_up is not None and _given_up.is_set()


def settle(clock: PodClock) -> None:
    """The measurement's outcome (or, for one host, its place)."""
    global _clock
    with _lock:
        _clock = clock
        if _measuring is not None:
            _measuring.set()


def current(wait_s: float | None = None) -> PodClock | None:
    """This process's place, once a measurement in flight ends (waiting at most `wait_s`,
    default `WRITE_WAIT_S`; then None and a warning); None where nothing was measured."""
    wait_s = WRITE_WAIT_S if wait_s is None else wait_s
    measuring, giving_up = _measuring, _given_up
    if measuring is not None and not measuring.wait(wait_s):
        if giving_up is not None:
            giving_up.set()
        warnings.warn(
            f"the clock offset to process 0 was still being measured after {wait_s:g} s (process "
            "0 records no timeline, or has not answered yet): this trace file is written "
            "without it, and `tpufeed trace merge` aligns it by wall clock only",
            stacklevel=3,
        )
        return None
    return _clock
