"""The runs alive in this process, and what the finished ones delivered: what metrics read.

A run adds itself when it starts and folds its figures into the finished tally when it closes,
so totals read at any time (a Prometheus scrape, `tpufeed.serve_metrics`) only grow, whatever
iterators come and go. Nothing here runs per item: a scrape asks each live run for its figures.
"""

from __future__ import annotations

import sys
import threading
import weakref
from dataclasses import dataclass, field
from typing import Protocol

from tpufeed.run.stats import WAIT_BUCKETS


@dataclass
class RunFigures:
    """What runs delivered (summed over runs), and their gauges now (live runs only)."""

    batches: int = 0  # items handed to the consumer
    records: int = 0  # records in them
    skipped: int = 0  # records skipped by ignore_errors
    wait_seconds: float = 0.0  # the consumer's wait in next(), in all
    wait_counts: list[int] = field(default_factory=lambda: [0] * (len(WAIT_BUCKETS) + 1))
    prefetch: int = 0  # items asked to be kept ready ahead
    queue_depth: int = 0  # items or chunks in flight now
    shm_bytes: int = 0  # shared memory the workers' batch slots take now
    # per stage: its seconds over the processes sharing it (the time it would take alone with
    # its parallelism), and its records: what a bottleneck over an interval is found from
    stage_seconds: dict[str, float] = field(default_factory=dict)
    stage_records: dict[str, int] = field(default_factory=dict)

    def add(self, other: RunFigures, gauges: bool) -> None:
        self.batches += other.batches
        self.records += other.records
        self.skipped += other.skipped
        self.wait_seconds += other.wait_seconds
        self.wait_counts = [a + b for a, b in zip(self.wait_counts, other.wait_counts)]
        for name, seconds in other.stage_seconds.items():
            self.stage_seconds[name] = self.stage_seconds.get(name, 0.0) + seconds
        for name, records in other.stage_records.items():
            self.stage_records[name] = self.stage_records.get(name, 0) + records
        if gauges:
            self.prefetch += other.prefetch
            self.queue_depth += other.queue_depth
            self.shm_bytes += other.shm_bytes


class FiguredRun(Protocol):
    def figures(self) -> RunFigures: ...


_lock = threading.Lock()
_live: weakref.WeakSet[FiguredRun] = weakref.WeakSet()
_finished = RunFigures()


def started(run: FiguredRun) -> None:
    with _lock:
        _live.add(run)


def finished(run: FiguredRun) -> None:
    """`run` has closed: its figures join the finished tally (once). Not at interpreter exit:
    nothing reads the tally then, and a run closed by its `__del__` there may find the modules
    its figures need already torn down."""
    if sys.is_finalizing():
        return
    with _lock:
        if run in _live:
            _live.discard(run)
            _finished.add(run.figures(), gauges=False)


# The training loops' own waits for batches, as the device adapters time them (to_jax, to_tf,
# to_torch: their WaitClock): the calls they counted, and the seconds those blocked. Where an
# adapter's transfer thread runs ahead, a run's own wait is that thread's, not the loop's.
_loop_calls = [0]
_loop_seconds = [0.0]


def loop_waited(seconds: float) -> None:
    """A training loop blocked `seconds` for a batch from a device adapter."""
    _loop_calls[0] += 1
    _loop_seconds[0] += seconds


def loop_waits() -> tuple[int, float]:
    """The training loops' calls for batches timed so far, and the seconds they blocked."""
    return _loop_calls[0], _loop_seconds[0]


def totals() -> tuple[RunFigures, int]:
    """The figures of every run so far, finished and alive (gauges: the live ones'), and the
    number of live runs."""
    with _lock:
        live = list(_live)
        out = RunFigures()
        out.add(_finished, gauges=False)
    for run in live:
        out.add(run.figures(), gauges=True)
    return out, len(live)
