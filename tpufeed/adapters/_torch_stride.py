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

from collections.abc import Callable, Iterator
from typing import Any

from tpufeed.errors import StateError
from tpufeed.ops.base import Counters, StageClock
from tpufeed.run.executor import Executor, InProcessExecutor
from tpufeed.run.iterator import DatasetIterator, Run
from tpufeed.run.pipeline_run import PipelineRun
from tpufeed.run.plan import Plan
from tpufeed.run.resume import Start, resume
from tpufeed.run.stats import PipelineStats

WORKER_KEY = "dataloader_worker"  # [w, W] in a strided worker's state


def is_worker_state(state: Any) -> bool:
    return isinstance(state, dict) and WORKER_KEY in state


def plain_state(state: Any) -> Any:
    """`state` unless it is a DataLoader worker's, which only that worker can continue."""
    if is_worker_state(state):
        raise StateError(
            f"this state is DataLoader worker {state[WORKER_KEY]!r}'s ([worker, "
            "workers]): only that worker continues it. Restore the DataLoader with torchdata's "
            "StatefulDataLoader.load_state_dict (same num_workers), which hands each worker "
            "its own"
        )
    return state


def strided_iterator(ds: Any, worker: int, workers: int, state: Any) -> DatasetIterator:
    """Worker `worker` of `workers`' share of the batches after `state`: a plain state (or every
    host's list) starts the stream there; a worker state of this worker continues it."""
    plan = ds._plan()

    def launch(state: Any) -> Callable[[], Run]:
        skip, state = _split(state, worker, workers)
        start = resume(plan, state)  # a bad state fails here, before any work
        return lambda: StridedRun(plan, start, skip, worker, workers)

    return DatasetIterator(launch, state)


def _split(state: Any, worker: int, workers: int) -> tuple[int, Any]:
    """(batches to skip, the plain state after which they start)."""
    if not is_worker_state(state):
        return worker, state
    mine = state.get(WORKER_KEY)
    if mine != [worker, workers]:
        raise StateError(
            f"this state is DataLoader worker {mine!r}'s ([worker, workers]), not "
            f"worker {worker} of {workers}'s: restore a DataLoader with "
            "StatefulDataLoader.load_state_dict and the same num_workers"
        )
    skip = state.get("skip")
    if not isinstance(skip, int) or isinstance(skip, bool) or not 0 <= skip < workers:
        raise StateError(
            f"DataLoader worker state field 'skip' must be an int in [0, {workers}), got {skip!r}"
        )
    if "state" not in state:
        raise StateError("DataLoader worker state has no 'state' field (the tpufeed state)")
    return skip, state["state"]


class StridedRun(Iterator[Any]):
    """One run of a fused plan from `start`: batches `skip`, `skip + workers`, ... after it.
    The run is the one every executor has; only its state says which worker it is."""

    def __init__(self, plan: Plan, start: Start, skip: int, worker: int, workers: int):
        self._skip, self._worker, self._workers = skip, worker, workers

        def strided(counters: Counters, clock: StageClock) -> Executor:
            return InProcessExecutor(plan, start.position, clock, every=(skip, workers))

        self._run = PipelineRun(plan, start, strided)

    def __iter__(self) -> StridedRun:
        return self

    def __next__(self) -> Any:
        item = next(self._run)
        self._skip = self._workers - 1  # the other workers' batches come before this one's next
        return item

    def start(self) -> None:
        self._run.start()

    def get_state(self) -> dict[str, Any]:
        return {
            WORKER_KEY: [self._worker, self._workers],
            "skip": self._skip,
            "state": self._run.get_state(),
        }

    def stats(self) -> PipelineStats:
        return self._run.stats()

    @property
    def epoch(self) -> int:
        return self._run.epoch

    @property
    def records_delivered(self) -> int:
        return self._run.records_delivered

    @property
    def dropped_records(self) -> int:
        return self._run.dropped_records

    def close(self) -> None:
        self._run.close()
