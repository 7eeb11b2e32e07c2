"""PipelineRun: one run of a plan from a start, the one every executor's iterator is.

Its executor's pieces go through the stream stages (on a prefetch thread, `prefetch` ahead,
where the executor runs chunks in this process), and it knows the exact position of what
`__next__` has returned. `start()` begins the first item before anyone asks for it (the batch
made while a model restores).
"""

from __future__ import annotations

import logging
import math
import os
import queue
from collections.abc import Callable, Iterator
from typing import Any

from tpufeed.observe import counts
from tpufeed.ops.base import Counters, StageClock, now
from tpufeed.order.cursor import Cursor
from tpufeed.run import live
from tpufeed.run.autotune import MAX_PREFETCH, Tuning
from tpufeed.run.executor import Executor
from tpufeed.run.mixture import mixture_stats
from tpufeed.run.plan import StreamPlan
from tpufeed.run.prefetch import ThreadPrefetcher, first_items
from tpufeed.run.resources import rss_bytes
from tpufeed.run.resume import Start
from tpufeed.run.stats import WAIT_BUCKETS, PipelineStats, StageStats, wait_bucket
from tpufeed.run.stream import stream
from tpufeed.run.watch import Beacon, timed_out

_ADAPT_EVERY = 16  # items between prefetch adjustments

log = logging.getLogger("tpufeed")


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
        self._head: ThreadPrefetcher | None = None  # the first items, begun by start()
        self._closed = False
        live.started(self)

    def __iter__(self) -> PipelineRun:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        started = now()
        try:
            if self._head is not None:
                item, position, stages = self._from_head(self._head)
            elif self._prefetcher is not None:
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

    def start(self) -> None:
        """Begins making the first items now, where none is made ahead yet (no prefetch thread,
        nothing returned): `prefetch` of them (at least one) on a thread, which deals workers
        their chunks as `next()` would (within `prefetch` and the shared-memory budget); then
        the run goes on as before. Idempotent."""
        ahead = self._prefetcher is not None or self._head is not None
        if self._closed or self._delivered or ahead:
            return
        count = max(1, self._prefetch)
        self._head = ThreadPrefetcher(first_items(self._items, count), count, "tpufeed start")

    def _from_head(self, head: ThreadPrefetcher) -> Any:
        """The next of the items `start()` began; once they are all taken (its thread has
        ended), the run goes on here. No timeout: a run with one has a prefetch thread, or
        workers that watch their own chunks."""
        try:
            return head.get()
        except StopIteration:  # the first items are taken, or the run ended with fewer
            self._head = None
            head.close()
            return next(self._items)

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
            pid=pids[0],
        )

    def figures(self) -> live.RunFigures:
        """What this run has delivered, and its gauges now (what metrics and the pod's summary
        read)."""
        stage_seconds, stage_records = {}, {}
        for name, seconds in list(self._clock.seconds.items()):
            procs = 1 if name == "transfer" or self._workers == 0 else self._workers
            stage_seconds[name] = seconds / procs
            stage_records[name] = self._clock.records[name]
        return live.RunFigures(
            batches=self._delivered,
            records=self._records,
            skipped=self._counters.errors,
            wait_seconds=self._waited,
            wait_counts=list(self._waits),
            prefetch=self._prefetch,
            queue_depth=self._queue_depth(),
            shm_bytes=self._executor.shm_bytes,
            stage_seconds=stage_seconds,
            stage_records=stage_records,
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
                head, self._head = self._head, None
                if head is not None:
                    head.close()
                if self._prefetcher is not None:
                    self._prefetcher.close()
                elif head is None or not head.running:  # a thread left inside the items
                    self._items.close()  # ends them itself (PrefetchStopped)
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
