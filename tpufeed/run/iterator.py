"""DatasetIterator: hands out items in order and knows exactly what the consumer has received.

`DatasetIterator` is what `Dataset.iterator()` returns: `get_state()` and `set_state(state)`
over one run of the pipeline (`PipelineRun`, or the run wrapped so that hosts end together).
`set_state` checks the state, stops the run (workers, prefetch) and starts a new one there.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from tpufeed.observe import counts, profiler
from tpufeed.observe.trace_file import TraceFile
from tpufeed.ops.base import Counters, StageClock, now
from tpufeed.order.cursor import Cursor
from tpufeed.run import live
from tpufeed.run.autotune import MAX_PREFETCH, Tuning
from tpufeed.run.executor import Executor
from tpufeed.run.mixture import mixture_stats
from tpufeed.run.plan import StreamPlan
from tpufeed.run.prefetch import ThreadPrefetcher
from tpufeed.run.resources import rss_bytes
from tpufeed.run.resume import Start, reweighable
from tpufeed.run.state_names import TorchStateNames
from tpufeed.run.stats import WAIT_BUCKETS, PipelineStats, StageStats, wait_bucket
from tpufeed.run.stream import stream
from tpufeed.run.watch import Beacon, timed_out

_ADAPT_EVERY = 16  # items between prefetch adjustments

log = logging.getLogger("tpufeed")


class Run(Protocol):
    """One run of a pipeline from a start position: what DatasetIterator delegates to."""

    def __next__(self) -> Any: ...
    def get_state(self) -> dict[str, Any]: ...
    def stats(self) -> PipelineStats: ...
    def close(self) -> None: ...
    @property
    def records_delivered(self) -> int: ...
    @property
    def dropped_records(self) -> int: ...
    @property
    def epoch(self) -> int: ...


# A state -> a run's launcher: checks the state (raising StateError before anything starts),
# and returns what starts the run there.
Launch = Callable[[Any], Callable[[], Run]]


class DatasetIterator(TorchStateNames, Iterator[Any]):
    """Iterator over a Dataset. `get_state()` describes what `__next__` has returned so far;
    `set_state(state)` continues right after `state` (one host's, or the list of all hosts').
    `state_dict()` / `load_state_dict(state)` are the same under torch's names.

    >>> it = iter(tpufeed.Dataset.from_sequence(range(10)).batch(4))   # doctest: +SKIP
    >>> next(it); state = it.get_state(); next(it)                      # doctest: +SKIP
    >>> it.set_state(state)     # the next batch is the second one again  # doctest: +SKIP
    """

    def __init__(
        self, launch: Launch, state: Any = None, trace: Any = None, allow_new_weights: bool = False
    ):
        """`trace`: a file to write the timeline of this iterator's runs to (`options(trace=)`):
        recorded from now (the workers' included), written when the iterator ends, fails or
        closes, and again after each `set_state` (each write holds all recorded before it)."""
        self._launch = launch
        self._lock = threading.Lock()
        self._closed = True  # until the first run starts
        self._trace = TraceFile(trace) if trace is not None else None
        self._run: Run = self._start(launch(reweighable(state, allow_new_weights)))
        self._closed = False
        _open.add(self)

    def _start(self, run: Callable[[], Run]) -> Run:
        """`run` started, recorded from before its workers start where a trace is asked."""
        if self._trace is None:
            return run()
        self._trace.begin()
        try:
            return run()
        except BaseException:
            self._trace.end()
            raise

    def __iter__(self) -> DatasetIterator:
        return self

    def __next__(self) -> Any:
        with self._lock:  # threads sharing one iterator each get whole items, in turn
            if self._closed:
                raise StopIteration
            spans = profiler.check()  # the one check per item: does a profiler record?
            try:
                if spans is None:
                    return next(self._run)
                with spans("next", "wait"):
                    return next(self._run)
            except BaseException:  # the end, or an error: the run has stopped
                if self._trace is not None:  # the file is written now
                    self.close()
                raise

    def get_state(self) -> dict[str, Any]:
        """A small JSON-able dict; `ds.iterator(state)` or `set_state(state)` resumes right
        after the last item returned."""
        with self._lock:
            return self._run.get_state()

    def set_state(self, state: Any, allow_new_weights: bool = False) -> None:
        """Continues right after `state` (as `Dataset.iterator(state)` would): the state is
        checked first (StateError leaves this iterator as it was), then the running workers
        and prefetch stop, and nothing they made ahead is delivered. Works on a closed or
        finished iterator too. In a multi-host run every host calls it at the same step.
        `allow_new_weights`: as in `Dataset.iterator` (a mixture's state, into other weights)."""
        with self._lock:
            launch = self._launch(reweighable(state, allow_new_weights))
            self.close()
            self._run = self._start(launch)
            self._closed = False

    def stats(self) -> PipelineStats:
        """Per-stage times and rates, the consumer's wait, queue depth and memory, since the
        iterator (or the last `set_state`) started."""
        return self._run.stats()

    @property
    def records_delivered(self) -> int:
        """Records in the items returned so far (batch sizes summed), since the start or the
        last `set_state`."""
        return self._run.records_delivered

    @property
    def dropped_records(self) -> int:
        """Records dropped by `batch(drop_remainder=True)` (and by hosts ending together) at
        the end of this host's epochs so far."""
        return self._run.dropped_records

    def close(self) -> None:
        """Stops background work. Safe to call more than once."""
        if not self._closed:
            self._closed = True
            try:
                self._run.close()
            finally:
                if self._trace is not None:  # the timeline so far, the workers' last included
                    self._trace.end()

    def __enter__(self) -> DatasetIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.close()


_open: weakref.WeakSet[DatasetIterator] = weakref.WeakSet()


@atexit.register
def _close_open_iterators() -> None:
    """Closes the iterators a script left open before its modules are torn down: closed by
    `__del__` during that teardown, one found tpufeed's functions gone and printed a
    traceback at exit (a script that imported torch)."""
    for it in list(_open):
        it.close()


class PipelineRun(Iterator[Any]):
    """One run of a plan from a start: its executor's pieces through the stream stages (on a
    prefetch thread, `prefetch` ahead, where the executor runs chunks here), and the exact
    position of what `__next__` has returned. Every executor's run is this one."""

    def __init__(
        self,
        plan: StreamPlan,
        start: Start,
        executor: Callable[[Counters, StageClock], Executor],
        prefetch: int = 0,
        workers: int = 0,
        tuning: Tuning | None = None,
        adapt_prefetch: bool = False,
        timeout_s: float | None = None,
        beacon: Beacon | None = None,
        log_every_s: float | None = None,
    ):
        self._plan = plan
        self._position, self._stages = start.position, start.stages
        self._counters, self._clock = Counters(), StageClock()
        self._workers, self._prefetch = workers, prefetch
        self._tuning, self._adapt = tuning, adapt_prefetch
        self._timeout_s, self._beacon = timeout_s, beacon
        self._window_start, self._window_wait = now(), 0.0
        self._started, self._waited, self._delivered, self._records = now(), 0.0, 0, 0
        self._counted = counts.snapshot()  # stats() reports what is counted after this
        self._waits = [0] * (len(WAIT_BUCKETS) + 1)  # next() calls per bucket of their wait
        self._log_every = log_every_s  # the periodic log line, if asked; the last one's stats:
        self._logged: PipelineStats | None = None
        self._log_at = self._started + log_every_s if log_every_s else math.inf
        self._closed = True  # until construction succeeds
        self._executor = executor(self._counters, self._clock)
        reread = self._executor.reread() if start.stages else None
        self._items = stream(
            plan, self._executor.pieces(), self._counters, self._clock, start.stages, reread
        )
        self._prefetcher = (
            ThreadPrefetcher(self._items, prefetch) if prefetch and not workers else None
        )
        self._closed = False
        live.started(self)

    def __iter__(self) -> PipelineRun:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        started = now()
        try:
            if self._prefetcher is not None:
                item, position, stages = self._get(self._prefetcher)
            else:
                item, position, stages = next(self._items)
        except BaseException:  # the end, or an error: the workers stop now, not when collected
            self.close()
            raise
        finally:
            waited = now() - started
            self._waited += waited
            self._window_wait += waited
        self._waits[wait_bucket(waited)] += 1  # per item handed out
        self._position, self._stages = position, stages
        self._delivered += 1
        if self._adapt and self._delivered % _ADAPT_EVERY == 0:
            self._adapt_prefetch()
        self._records += _record_count(item) if self._plan.batch is not None else 1
        if started >= self._log_at:
            self._log_progress(started)
        return item

    def _log_progress(self, at: float) -> None:
        """The periodic line of `options(log_every_s=...)`, through the `tpufeed` logger."""
        stats = self.stats()
        log.info("%s", stats.progress(self._logged))
        self._logged, self._log_at = stats, at + (self._log_every or math.inf)

    def _get(self, prefetcher: ThreadPrefetcher) -> Any:
        """The prefetch thread's next item; past `timeout_s`, an error naming where it is."""
        try:
            return prefetcher.get(self._timeout_s)
        except queue.Empty:
            if self._timeout_s is None:  # only a wait with a timeout ends empty
                raise
            error = timed_out(
                self._timeout_s, "the prefetch thread", self._beacon, self._plan.names
            )
            self.close()
            raise error from None

    def get_state(self) -> dict[str, Any]:
        """The position right after the last item returned."""
        return self._plan.state_of(self._position, self._stages)

    @property
    def epoch(self) -> int:
        """The epoch of the last item returned (a mixture's is 0: its components have theirs)."""
        return self._position.epoch if isinstance(self._position, Cursor) else 0

    def _adapt_prefetch(self) -> None:
        """Deepens prefetch while the consumer waits more than 10% of the time, within budget."""
        window = now() - self._window_start
        waited, self._window_start, self._window_wait = self._window_wait, now(), 0.0
        tuning = self._tuning
        deeper = self._prefetch + 1
        if (
            tuning is None
            or window <= 0
            or waited / window < 0.1
            or deeper > MAX_PREFETCH
            or tuning.buffer_bytes(self._workers, deeper) > tuning.budget_bytes
        ):
            return
        self._prefetch = deeper
        if self._prefetcher is not None:
            self._prefetcher.deepen(deeper)
        else:
            self._executor.deepen(deeper)

    def stats(self) -> PipelineStats:
        """Per-stage times and rates, the consumer's wait, queue depth and memory, so far."""
        workers = self._workers
        stages = {}
        for name, seconds in list(self._clock.seconds.items()):
            procs = 1 if name == "transfer" or workers == 0 else workers
            stages[name] = StageStats(seconds, self._clock.records[name], procs)
        pids = [os.getpid()] + self._executor.worker_pids
        counters, per_worker = self._counters, self._executor.worker_stats()
        return PipelineStats(
            wall_seconds=now() - self._started,
            wait_seconds=self._waited,
            batches=self._delivered,
            records=self._records,
            workers=workers,
            prefetch=self._prefetch,
            queue_depth=self._queue_depth(),
            memory_bytes=sum(rss_bytes(pid) for pid in pids),
            dropped_records=counters.dropped_records,
            errors=counters.errors,
            padded_rows=counters.padded_rows,
            pack_fill=(
                counters.pack_tokens / counters.pack_capacity if counters.pack_capacity else None
            ),
            stages=stages,
            tuning=self._tuning.reason if self._tuning is not None else None,
            mixture=mixture_stats(self._plan, self._position),
            counts=counts.since(self._counted),
            per_worker=per_worker,
            wait_histogram=tuple(self._waits),
            shm_bytes=sum(w.shm_bytes for w in per_worker),
        )

    def figures(self) -> live.RunFigures:
        """What this run has delivered, and its gauges now (what metrics read)."""
        return live.RunFigures(
            batches=self._delivered,
            records=self._records,
            skipped=self._counters.errors,
            wait_seconds=self._waited,
            wait_counts=list(self._waits),
            prefetch=self._prefetch,
            queue_depth=self._queue_depth(),
            shm_bytes=self._executor.shm_bytes,
        )

    def _queue_depth(self) -> int:
        """Items ready on the prefetch thread, or chunks dealt ahead to the workers."""
        if self._prefetcher is not None:
            return self._prefetcher.depth()
        return self._executor.queue_depth

    @property
    def records_delivered(self) -> int:
        """Records in the items returned so far (batch sizes summed)."""
        return self._records

    @property
    def dropped_records(self) -> int:
        """Records dropped by `batch(drop_remainder=True)` at the end of this host's epochs so far."""
        return self._counters.dropped_records

    def close(self) -> None:
        """Stops background work. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        try:
            live.finished(self)  # before the executor closes: its figures read the workers'
        finally:
            try:
                if self._prefetcher is not None:
                    self._prefetcher.close()
                else:
                    self._items.close()
            finally:
                self._executor.close()

    def __del__(self) -> None:
        if hasattr(self, "_closed"):  # construction may have failed before it was set
            self.close()


def _record_count(batch: Any) -> int:
    """Records in a batch: the leading dimension of its first leaf."""
    while isinstance(batch, (dict, tuple, list)) and len(batch):
        batch = next(iter(batch.values())) if isinstance(batch, dict) else batch[0]
    return len(batch) if hasattr(batch, "__len__") else 1
