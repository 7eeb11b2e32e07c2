"""DataLoader worker w of W makes batches w, w+W, w+2W, ... of the one-process stream.

The DataLoader asks its workers for batches in turn (0, 1, ..., W-1, 0, ...), so the loop
receives exactly the batches of `num_workers=0`, in the same order. This holds where each
chunk of the walk is one whole batch (`Plan.fused`: batched, with counts that cannot depend
on the data); a worker reads and transforms only its own chunks, on the one data path
(walk, ChunkRunner, stream) run in this process.

A worker's state says where its next batch is: `skip` batches of the stream after `state`
(a plain tpufeed state), then every W-th. StatefulDataLoader hands each worker its own back.

>>> it = strided_iterator(ds, worker=1, workers=2, state=None)   # doctest: +SKIP
>>> next(it)    # the stream's second batch; the next is its fourth  # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator
from typing import Any, cast

from tpufeed.chunk import ChunkRunner
from tpufeed.ops.base import Chunk
from tpufeed.order.cursor import Cursor
from tpufeed.errors import StateError
from tpufeed.iterator import DatasetIterator, Run, _record_count
from tpufeed.plan import Plan
from tpufeed.resume import resume
from tpufeed.ops.base import StageClock, now
from tpufeed.stats import PipelineStats, StageStats, rss_bytes
from tpufeed.ops.base import Counters
from tpufeed.stream import stream
from tpufeed.walk import walk

WORKER_KEY = "dataloader_worker"  # [w, W] in a strided worker's state


def is_worker_state(state: Any) -> bool:
    return isinstance(state, dict) and WORKER_KEY in state


def strided_iterator(ds: Any, worker: int, workers: int, state: Any) -> DatasetIterator:
    """Worker `worker` of `workers`' share of the batches after `state`: a plain state (or every
    host's list) starts the stream there; a worker state of this worker continues it."""
    plan = ds._plan()

    def start(state: Any) -> Callable[[], Run]:
        skip, state = _split(state, worker, workers)
        cursor, _ = resume(plan, state)  # a bad state fails here, before any work
        return lambda: StridedRun(plan, cast(Cursor, cursor), skip, worker, workers)

    return DatasetIterator(start, state)


def _split(state: Any, worker: int, workers: int) -> tuple[int, Any]:
    """(batches to skip, the plain state after which they start)."""
    if not is_worker_state(state):
        return worker, state
    mine = state.get(WORKER_KEY)
    if mine != [worker, workers]:
        raise StateError(f"this state is DataLoader worker {mine!r}'s ([worker, workers]), not "
                         f"worker {worker} of {workers}'s: restore a DataLoader with "
                         "StatefulDataLoader.load_state_dict and the same num_workers")
    skip = state.get("skip")
    if not isinstance(skip, int) or isinstance(skip, bool) or not 0 <= skip < workers:
        raise StateError(f"DataLoader worker state field 'skip' must be an int in [0, "
                         f"{workers}), got {skip!r}")
    if "state" not in state:
        raise StateError("DataLoader worker state has no 'state' field (the tpufeed state)")
    return skip, state["state"]


class StridedRun(Iterator[Any]):
    """One run of a fused plan from `cursor`: batches `skip`, `skip + workers`, ... after it."""

    def __init__(self, plan: Plan, cursor: Cursor, skip: int, worker: int, workers: int):
        self._plan, self._cursor, self._skip = plan, cursor, skip
        self._worker, self._workers = worker, workers
        self._counters, self._clock = Counters(), StageClock()
        self._started, self._waited, self._delivered, self._records = now(), 0.0, 0, 0
        runner = ChunkRunner(plan, self._clock)
        pieces = (runner.run_chunk(step) if isinstance(step, Chunk) else step
                  for step in every_nth(walk(plan, cursor), skip, workers))
        self._items = cast(Generator[Any, None, None],
                           stream(plan, pieces, self._counters, self._clock, cursor))
        self._closed = False

    def __iter__(self) -> StridedRun:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        started = now()
        try:
            item, self._cursor, _ = next(self._items)
        finally:
            self._waited += now() - started
        self._skip = self._workers - 1  # the other workers' batches come before this one's next
        self._delivered += 1
        self._records += _record_count(item)
        return item

    def get_state(self) -> dict[str, Any]:
        return {WORKER_KEY: [self._worker, self._workers], "skip": self._skip,
                "state": self._plan.state_of(self._cursor, None)}

    def stats(self) -> PipelineStats:
        stages = {name: StageStats(seconds, self._clock.records[name], 1)
                  for name, seconds in list(self._clock.seconds.items())}
        return PipelineStats(
            wall_seconds=now() - self._started, wait_seconds=self._waited,
            batches=self._delivered, records=self._records, workers=0, prefetch=0,
            queue_depth=0, memory_bytes=rss_bytes(os.getpid()),
            dropped_records=self._counters.dropped_records, errors=self._counters.errors,
            stages=stages)

    @property
    def records_delivered(self) -> int:
        return self._records

    @property
    def dropped_records(self) -> int:
        return self._counters.dropped_records

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._items.close()


def every_nth(steps: Iterator[Any], skip: int, every: int) -> Iterator[Any]:
    """The chunks `skip`, `skip + every`, ... of a walk (positions are computed for all, but
    only these are read). An epoch's end passes where this worker had a chunk of the epoch,
    or where the epoch had none: `stream` then refuses an endless repeat of nothing, as the
    one-process run does, and does not mistake another worker's epoch for an empty one."""
    index, mine, any_chunk = 0, False, False
    for step in steps:
        if isinstance(step, Chunk):
            any_chunk = True
            if index >= skip and (index - skip) % every == 0:
                mine = True
                yield step
            index += 1
            continue
        if mine or not any_chunk:
            yield step
        mine = any_chunk = False
