"""ParallelProducer: the Producer's contract (`items()` yields (item, cursor after it)), with the
element and batch stages running in worker processes.

Answers are consumed in task order, so the output is the same item for item as with no workers;
they are received as they come. A worker is given a task when it has fewer than two unanswered
and a free slot for the answer, so one that falls behind (descheduled, slower records) gets fewer
tasks and never holds the others up. Without a filter a task is one whole batch, stacked by the
worker straight into a shared-memory slot. With a filter a task is a chunk of positions whose
survivors the worker stacks; the parent cuts batches from consecutive chunks, as the Producer
would.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tpufeed.errors import TpufeedError
from tpufeed.order import Cursor, share_size
from tpufeed.pipeline import Counters, ErrorBudget, IndexBlocks, Plan
from tpufeed.stages import ElementStage, FilterOp
from tpufeed.workers.layout import concat, read_batch, take
from tpufeed.workers.pool import WorkerPool, rebuild_error
from tpufeed.workers.slots import segment_prefix
from tpufeed.workers.task import TaskRunner
from tpufeed.stats import StageClock, now


@dataclass
class _Task:
    cursor: Cursor
    start: int  # first position of the host's share in this task
    count: int
    indices: np.ndarray


@dataclass
class _EndOfEpoch:
    cursor: Cursor
    share: int


_QUEUED_PER_WORKER = 2  # one task running, one waiting, so a worker never waits for the parent


@dataclass
class _Dealer:
    """Hands tasks to workers and collects their answers, which may come before their turn."""

    pool: WorkerPool
    tasks: Iterator[_Task | _EndOfEpoch]
    slots_per_worker: int
    limit: int = 1  # tasks in flight, all workers together (set by `set_depth`)
    held_per_worker: int = 1  # answers a worker may hold in slots before the parent consumes them
    inflight: deque = field(default_factory=deque)  # (task, worker, task id), in order
    answers: dict[int, tuple] = field(default_factory=dict)
    dealt: int = 0
    exhausted: bool = False

    def __post_init__(self) -> None:
        self.queued = [0] * self.pool.size  # given to the worker, not answered yet
        self.held = [0] * self.pool.size  # given to the worker, answer not consumed yet

    def set_depth(self, depth: int) -> None:
        """Room for `depth` answers ahead of the consumer, spread over the workers."""
        workers = self.pool.size
        self.held_per_worker = max(1, min(self.slots_per_worker, -(-depth // workers) + 1))
        self.limit = depth + workers

    def deal(self) -> None:
        """Deals tasks while there is room: at most `limit` in flight, and per worker at most
        `_QUEUED_PER_WORKER` unanswered and `held_per_worker` unconsumed.

        Until a worker has started, the parent runs tasks itself, one at a time (worker None):
        the first batches come at in-process speed, and results are the same either way.
        """
        while not self.exhausted and len(self.inflight) < self.limit:
            ready = self.pool.ready()
            if not ready and self.inflight:
                return
            room = [w for w in ready
                    if self.queued[w] < _QUEUED_PER_WORKER and self.held[w] < self.held_per_worker]
            if ready and not room:
                return
            task = next(self.tasks, None)
            if task is None:
                self.exhausted = True
                return
            worker = task_id = None
            if isinstance(task, _Task):
                task_id, self.dealt = self.dealt, self.dealt + 1
                if room:
                    worker = min(room, key=lambda w: (self.queued[w], self.held[w]))
                    self.queued[worker] += 1
                    self.held[worker] += 1
                    self.pool.send(worker, ("task", task_id, task.cursor.epoch,
                                            task.indices.tobytes()))
            self.inflight.append((task, worker, task_id))

    def answer(self, worker: int, task_id: int) -> tuple:
        """The answer to `task_id`; while it is not there, takes the others and deals more."""
        while task_id not in self.answers:
            for sender, message in self.pool.receive_any():
                if message[1] == -1:  # a start-up failure, not a task's
                    raise rebuild_error(message[2], sender)
                self.answers[message[1]] = message
                self.queued[sender] -= 1
            self.deal()
        self.held[worker] -= 1
        return self.answers.pop(task_id)


@dataclass
class ParallelProducer:
    plan: Plan
    cursor: Cursor
    workers: int
    prefetch: int
    counters: Counters = field(default_factory=Counters)
    clock: StageClock = field(default_factory=StageClock)
    max_prefetch: int = 0  # slots are sized for this depth; segments are made only when used

    def __post_init__(self) -> None:
        self.batched = self.plan.batch is not None
        # A task is exactly one batch unless records can drop out (a filter, skipped errors).
        self.whole_batches = self.batched and self.plan.max_errors == 0 and not any(
            isinstance(op, FilterOp) for op in self.plan.element_ops)
        self.depth = self.depth_for(self.prefetch)
        deepest = max(1, self.prefetch, self.max_prefetch) + 2 * self.workers
        self.slots_per_worker = -(-deepest // self.workers) + 1
        self._local: TaskRunner | None = None
        self.queue_depth = 0
        self.worker_pids: list[int] = []

    def depth_for(self, prefetch: int) -> int:
        """Sets (and returns) the tasks in flight for a prefetch depth."""
        self.depth = max(1, prefetch) + 2 * self.workers
        return self.depth

    def start(self) -> WorkerPool:
        """Starts the workers now, so they boot while the caller does other work."""
        init = {"plan": self.plan, "batched": self.batched, "whole_batches": self.whole_batches,
                "slots": self.slots_per_worker}
        pool = WorkerPool(init, self.workers, segment_prefix(uuid.uuid4().hex[:8]))
        self.worker_pids = pool.pids
        return pool

    def items(self, pool: WorkerPool | None = None) -> Iterator[tuple[Any, Cursor]]:
        pool = pool or self.start()
        try:
            yield from self._run(pool)
        finally:
            pool.close()

    def _tasks(self) -> Iterator[_Task | _EndOfEpoch]:
        plan, cursor = self.plan, self.cursor
        n = len(plan.source)
        while plan.epochs is None or cursor.epoch < plan.epochs:
            share = share_size(n, cursor.base, cursor.host, cursor.hosts)
            blocks = IndexBlocks(n, plan.shuffle, cursor, plan.source)
            k = cursor.consumed
            while k < share:
                count = min(plan.chunk, share - k)
                if self.whole_batches and plan.batch.drop_remainder and count < plan.batch.batch_size:
                    self.counters.dropped_records += count
                    break
                yield _Task(cursor, k, count, blocks.get(k, count))
                k += count
            yield _EndOfEpoch(cursor, share)
            cursor = Cursor(cursor.epoch + 1, 0, plan.hosts, plan.host, 0)

    def _run(self, pool: WorkerPool) -> Iterator[tuple[Any, Cursor]]:
        plan = self.plan
        dealer = _Dealer(pool, self._tasks(), self.slots_per_worker)
        pieces: list[tuple[Any, list[int], _Task]] = []  # filter mode: (stacked survivors, offsets, task)
        yielded_this_epoch = False
        batch_stage = ElementStage(plan.batch_ops, plan.rng_seed, plan.source, self.clock,
                                   on_batches=True, tolerant=plan.max_errors > 0)
        self._budget = ErrorBudget(plan.max_errors, self.counters)
        while True:
            dealer.set_depth(self.depth)  # prefetch("auto") may have deepened it
            dealer.deal()
            self.queue_depth = len(dealer.inflight)
            if not dealer.inflight:
                return
            task, worker, task_id = dealer.inflight.popleft()
            if isinstance(task, _EndOfEpoch):
                for item in self._end_epoch(pieces, task, batch_stage):
                    yielded_this_epoch = True
                    yield item
                pieces = []
                if not yielded_this_epoch and plan.epochs is None and task.cursor.consumed == 0 \
                        and task.cursor.base == 0:
                    raise TpufeedError(
                        f"epoch {task.cursor.epoch} produced nothing for host {task.cursor.host} of "
                        f"{task.cursor.hosts} (a filter may drop every record), so repeat() would "
                        "loop forever")
                yielded_this_epoch = False
                continue
            if worker is None:
                kind, piece, offsets = self._runner().run(task.indices, task.cursor.epoch)
                message = (kind, None, piece, offsets, self._runner().take_skipped(), {})
            else:
                message = dealer.answer(worker, task_id)
            if message[0] == "error":
                raise rebuild_error(message[2], worker)
            self.clock.merge(message[-1])
            if message[-2]:
                self._budget.charge([e if worker is None else rebuild_error(e, worker)
                                     for e in message[-2]])
            if message[0] == "items":
                for element, offset in zip(message[2], message[3]):
                    yielded_this_epoch = True
                    yield element, replace(task.cursor, consumed=task.start + offset + 1)
                continue
            if worker is None:
                piece, offsets = message[2], message[3]
            else:
                _, _, slot, new_segment, layout, offsets, _, _ = message
                piece = None
                if slot is not None:
                    started = now()
                    piece = read_batch(layout, pool.slot_maps.buffer(worker, slot, new_segment))
                    pool.send(worker, ("free", slot))
                    self.clock.add("transfer", now() - started, len(offsets))
            if self.whole_batches:
                if piece is not None:
                    yielded_this_epoch = True
                    yield piece, replace(task.cursor, consumed=task.start + task.count)
                continue
            if piece is not None:
                pieces.append((piece, offsets, task))
            for item in self._cut_batches(pieces, batch_stage, final=False):
                yielded_this_epoch = True
                yield item

    def _runner(self) -> TaskRunner:
        if self._local is None:
            self._local = TaskRunner(self.plan, self.batched, self.whole_batches, self.clock)
        return self._local

    def _end_epoch(self, pieces: list, end: _EndOfEpoch, batch_stage: ElementStage) -> list:
        if self.whole_batches or not self.batched:
            return []
        out = []
        rest = sum(len(offsets) for _, offsets, _ in pieces)
        if rest and self.plan.batch.drop_remainder:
            self.counters.dropped_records += rest
        elif rest:
            out = self._cut_batches(pieces, batch_stage, final=True, end=end)
        pieces.clear()
        return out

    def _cut_batches(self, pieces: list, batch_stage: ElementStage, final: bool,
                     end: _EndOfEpoch | None = None) -> list[tuple[Any, Cursor]]:
        """Cuts full batches (or, at the end of an epoch, the partial one) off the front of `pieces`."""
        size = self.plan.batch.batch_size
        out = []
        while pieces and (final or sum(len(o) for _, o, _ in pieces) >= size):
            parts, need = [], size
            first_record = int(pieces[0][2].indices[pieces[0][1][0]])
            while need and pieces:
                piece, offsets, task = pieces[0]
                n = len(offsets)
                if n <= need:
                    parts.append(piece)
                    pieces.pop(0)
                    last_task, last_offset = task, offsets[-1]
                    need -= n
                else:
                    parts.append(take(piece, 0, need))
                    pieces[0] = (take(piece, need, n), offsets[need:], task)
                    last_task, last_offset = task, offsets[need - 1]
                    need = 0
            batch = concat(parts)
            consumed = end.share if final and end is not None else last_task.start + last_offset + 1
            if batch_stage.ops:
                kept, _ = batch_stage.run([batch], [first_record], last_task.cursor.epoch)
                self._budget.charge(batch_stage.skipped)
                batch_stage.skipped.clear()
                out += [(b, replace(last_task.cursor, consumed=consumed)) for b in kept]
            else:
                out.append((batch, replace(last_task.cursor, consumed=consumed)))
        return out
