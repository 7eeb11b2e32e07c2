"""WorkerExecutor: a run's chunks run in worker processes.

The walk and the chunk runner are the in-process executor's (tpufeed.run.executor); only where
chunks run differs. Answers are consumed in task order, so the output is the same item for
item as with no workers; they are received as they come. A worker is given a task when it has
fewer than two unanswered and a free slot for the answer, so one that falls behind (descheduled,
slower records) gets fewer tasks and never holds the others up. Batched pipelines' pieces are
stacked by the worker straight into a shared-memory slot; where a chunk is exactly one batch
(counts cannot depend on the data) the worker finishes the batch whole, and the consumer gets it
as views of that slot, lent until it drops them (`leases.py`): the parent copies nothing.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tpufeed.errors import InputTimeoutError
from tpufeed.observe import timeline
from tpufeed.ops.base import Chunk, EpochEnd, Piece, Reread, StageClock, now
from tpufeed.order.cursor import Cursor
from tpufeed.run.chunks import ChunkRunner, WarmPieces, reread
from tpufeed.run.plan import Plan
from tpufeed.run.resources import cpu_count
from tpufeed.run.walk import walk
from tpufeed.run.watch import beacon_at, labels_of, timed_out
from tpufeed.run.workers.budget import shm_budget, worker_share
from tpufeed.run.workers.layout import read_batch, read_elements
from tpufeed.run.workers.leases import Leases
from tpufeed.run.workers.liveness import STOPPED_S
from tpufeed.run.workers.messages import Answer, Failure, encode_free, encode_task
from tpufeed.run.workers.pool import WorkerPool, rebuild_error
from tpufeed.run.workers.shares import WorkerShares, WorkerStats
from tpufeed.run.workers.slots import segment_prefix

_QUEUED_PER_WORKER = 2  # one task running, one waiting, so a worker never waits for the parent
_KEPT_BY_CONSUMER = 4  # batches a training loop may hold past its step and still get lent


@dataclass
class _Dealer:
    """Hands chunks to workers and collects their answers, which may come before their turn."""

    pool: WorkerPool
    steps: Iterator[Chunk | EpochEnd]
    slots_per_worker: int
    leases: Leases
    limit: int = 1  # steps in flight, all workers together (set by `set_depth`)
    held_per_worker: int = 1  # answers a worker may hold in slots before the parent consumes them
    isolate: bool = False  # never run a chunk in the parent, even while workers start
    run_here: Callable[[Chunk], Piece] | None = None  # runs a chunk in the parent (stealing)
    spare_core: bool = False  # fewer workers than cores: steal whenever the parent would wait
    names: Any = None  # the plan's source, to word the records a lost worker was making
    tight: bool = False  # a worker's share of the budget holds fewer segments than its slots
    inflight: deque = field(default_factory=deque)  # (step, worker, task id), in order
    stolen: dict[int, Piece | Exception] = field(default_factory=dict)  # run here, ahead
    warm: WarmPieces = field(default_factory=WarmPieces)
    answers: dict[int, Answer | Failure] = field(default_factory=dict)
    dealt: int = 0
    exhausted: bool = False

    def __post_init__(self) -> None:
        self.queued = [0] * self.pool.size  # given to the worker, not answered yet
        self.held = [0] * self.pool.size  # given to the worker, answer not consumed yet
        self.freed: list[list[int]] = [[] for _ in range(self.pool.size)]  # not sent yet
        self.answered: set[int] = set()  # workers that have answered a task: warm

    def set_depth(self, depth: int) -> None:
        """Room for `depth` answers ahead of the consumer, spread over the workers."""
        workers = self.pool.size
        unlent = self.slots_per_worker - self.leases.cap
        self.held_per_worker = max(1, min(unlent, -(-depth // workers) + 1))
        self.limit = depth + workers

    def work_of(self, worker: int) -> str:
        """ " while making records a..b (where the first is)": the chunk `worker` was given and
        has not answered, for an error that names what a lost worker was doing."""
        for step, sender, task_id in self.inflight:
            if sender == worker and task_id not in self.answers:
                first, last = int(step.records[0]), int(step.records[-1])
                where = self.names.describe(first) if self.names is not None else f"record {first}"
                return f" while making the chunk of records {first}..{last} (the first: {where})"
        return ""

    def free(self, worker: int, slot: int) -> None:
        """`slot` of `worker` is free again; the worker hears so with its next task (or
        `send_freed`), before it could need the slot, or at once where its share of the
        shared-memory budget is `tight` (it may be waiting for this slot)."""
        self.freed[worker].append(slot)
        if self.tight:
            self.pool.send(worker, encode_free(self.freed[worker]))
            self.freed[worker].clear()

    def send_freed(self) -> None:
        """Tells each worker the slots freed since its last task (the ones it may wait for)."""
        for worker, slots in enumerate(self.freed):
            if slots:
                self.pool.send(worker, encode_free(slots))
                slots.clear()

    def deal(self) -> None:
        """Deals chunks while there is room: at most `limit` in flight, and per worker at most
        `_QUEUED_PER_WORKER` unanswered and `held_per_worker` unconsumed.

        Until a worker has started, the parent runs chunks itself, one at a time (worker None):
        the first batches come at in-process speed, and results are the same either way.
        `isolate`d, it deals nothing until a worker has started.
        """
        for owner, slot in self.leases.returned():
            self.free(owner, slot)
        lent = self.leases.lent
        while not self.exhausted and len(self.inflight) < self.limit:
            ready = self.pool.ready()
            if not ready and (self.inflight or self.isolate):
                return
            room = [
                w
                for w in ready
                if self.queued[w] < _QUEUED_PER_WORKER
                and self.held[w] < self.held_per_worker
                and self.held[w] + lent[w] < self.slots_per_worker
            ]
            if ready and not room:
                return
            step = next(self.steps, None)
            if step is None:
                self.exhausted = True
                return
            worker: int | None = None
            task_id: int | None = None
            if isinstance(step, Chunk):
                task_id, self.dealt = self.dealt, self.dealt + 1
                made = self.warm.take(step)
                if made is not None:  # already made by the warm-up: waits its turn here
                    self.stolen[task_id] = made
                elif room:
                    worker = self._send(room, task_id, step)
            self.inflight.append((step, worker, task_id))

    def _send(self, room: list[int], task_id: int, chunk: Chunk) -> int:
        """Sends `chunk` to the worker of `room` with the least queued and held; returns it."""
        worker = min(room, key=lambda w: (self.queued[w], self.held[w]))
        self.queued[worker] += 1
        self.held[worker] += 1
        skips = chunk.skips.tobytes() if chunk.skips is not None else None
        task = encode_task(
            task_id, chunk.cursor.epoch, chunk.records.tobytes(), skips, self.freed[worker]
        )
        self.pool.send(worker, task)
        self.freed[worker].clear()
        return worker

    def may_steal(self) -> bool:
        """Whether the parent runs chunks itself while it waits: always where it has a core of
        its own; else only while a worker has not answered yet. A worker's first task is slow
        (it opens its files, warms its caches), and meanwhile its core is not busy."""
        return self.run_here is not None and (
            self.spare_core or len(self.answered) < self.pool.size
        )

    def steal(self) -> bool:
        """Runs the next chunk here rather than wait (see `may_steal`; every worker has a full
        queue): its piece waits its turn in order, and so does an error it raised. False when
        there is nothing to take."""
        if self.exhausted or len(self.inflight) >= self.limit or self.run_here is None:
            return False
        step = next(self.steps, None)
        if step is None:
            self.exhausted = True
            return False
        task_id = None
        if isinstance(step, Chunk):
            task_id, self.dealt = self.dealt, self.dealt + 1
            try:
                self.stolen[task_id] = self.run_here(step)
            except Exception as error:  # noqa: BLE001 - raised in order, when its turn comes
                self.stolen[task_id] = error
        self.inflight.append((step, None, task_id))
        return True

    def spill_if_stuck(self, worker: int, task_id: int) -> None:
        """Tells `worker` to send the batch of `task_id` through the pipe where it waits for
        room in the worker's share that only batches lent to the consumer can give: the
        consumer is here, waiting for that very batch, so the room would never come. Room
        that other segments hold comes without it (slots freed, idle segments given back)."""
        cramped = self.pool.cramped.get(worker)
        if cramped is None or cramped.task_id != task_id:
            return
        share = self.leases.share
        if share is not None and self.leases.lent_bytes[worker] + cramped.nbytes <= share:
            return
        self.pool.spill(worker)

    def answer(
        self, worker: int, task_id: int, timeout: Callable[[], Exception | None] | None = None
    ) -> Answer | Failure:
        """The answer to `task_id`; while it is not there, takes the others and deals more.
        `timeout`: the error to raise once the wait is past its limit (None: wait on)."""
        while task_id not in self.answers:
            if timeout is not None:
                error = timeout()
                if error is not None:
                    raise error
            if self.pool.cramped:
                self.spill_if_stuck(worker, task_id)
            stealing = self.may_steal()
            messages = self.pool.receive_any(0.0 if stealing else None)
            if not messages:
                if stealing and self.steal():
                    continue
                messages = self.pool.receive_any()
            if not messages:  # nothing for a while: never leave a worker waiting for a slot
                self.send_freed()
            for sender, message in messages:
                if isinstance(message, Failure) and message.task_id == -1:  # failed to start
                    raise rebuild_error(message.fields, sender)
                self.answers[message.task_id] = message
                self.queued[sender] -= 1
                self.answered.add(sender)
            self.deal()
        self.held[worker] -= 1
        return self.answers.pop(task_id)


@dataclass
class WorkerExecutor:
    plan: Plan
    cursor: Cursor
    workers: int
    prefetch: int
    clock: StageClock = field(default_factory=StageClock)
    max_prefetch: int = 0  # slots are sized for this depth; segments are made only when used
    isolate: bool = False  # no chunk runs in this process, even while workers start
    timeout_s: float | None = None  # the longest wait for one chunk's answer (isolates)
    stopped_s: float | None = STOPPED_S  # the longest wait for a stopped worker (None: no limit)
    shm_budget_bytes: int | None = None  # what the slots may hold in /dev/shm (None: default)
    warm: tuple[Piece, ...] = ()  # the first chunks' pieces, made by the "auto" warm-up

    def __post_init__(self) -> None:
        self.deepen(self.prefetch)
        deepest = max(1, self.prefetch, self.max_prefetch) + 2 * self.workers
        # Lent to the consumer: the prefetched batches, the one it holds, the one it is about to
        # take, and a few it keeps a little longer (steps in flight under async dispatch, the
        # last batch kept for logging). Slots are made only when used, so room to lend costs
        # nothing unused. Past this a batch is copied, so a consumer that keeps them all never
        # stalls the workers.
        lendable = max(self.prefetch, self.max_prefetch) + 2 + _KEPT_BY_CONSUMER
        self.lend_per_worker = -(-lendable // self.workers) + 1
        self.slots_per_worker = -(-deepest // self.workers) + 1 + self.lend_per_worker
        self._local: ChunkRunner | None = None
        self.queue_depth = 0
        self._pool: WorkerPool | None = None
        self.shm_budget = shm_budget(self.shm_budget_bytes)
        self.shares = WorkerShares()  # per worker: its stage times and counts
        self.start()  # from the moment the run is made: workers boot while the caller goes on

    @property
    def worker_pids(self) -> list[int]:
        """The workers' pids (forked workers: the first call waits until they are forked)."""
        return self._pool.pids if self._pool is not None else []

    def worker_stats(self) -> tuple[WorkerStats, ...]:
        return self.shares.stats(self.worker_pids, self._pool.slot_maps if self._pool else None)

    @property
    def shm_bytes(self) -> int:
        return self._pool.slot_maps.mapped_bytes() if self._pool is not None else 0

    def deepen(self, prefetch: int) -> None:
        """Sets the chunks in flight for a prefetch depth."""
        self.depth = max(1, prefetch) + 2 * self.workers

    def start(self) -> WorkerPool:
        """Starts the workers now, so they boot while the caller does other work."""
        if self._pool is None:
            init = {
                "plan": self.plan,
                "slots": self.slots_per_worker,
                "count": self.workers,
                "watch": self.timeout_s is not None,
                "shm_budget": self.shm_budget,
                "trace": timeline.recording() is not None,  # the workers record one too
            }
            prefix = segment_prefix(uuid.uuid4().hex[:8])
            self._pool = WorkerPool(init, self.workers, prefix, self.stopped_s)
        return self._pool

    def reread(self) -> Reread:
        return reread(self.plan, self.cursor.epoch, self.clock)

    def close(self) -> None:
        """Stops the workers and frees their shared memory (batches still lent stay valid)."""
        if self._pool is not None:
            self._pool.close()

    def pieces(self) -> Iterator[Piece | EpochEnd]:
        """The plan's pieces in order, their chunks run by the pool's workers."""
        pool = self.start()
        isolate = self.isolate or self.timeout_s is not None
        # The parent runs chunks itself when it would otherwise wait: on a core of its own, or
        # while the workers are still cold. Where warm workers fill every core it would only
        # slow them down.
        dealer = _Dealer(
            pool,
            walk(self.plan, self.cursor),
            self.slots_per_worker,
            Leases(pool.size, self.lend_per_worker, worker_share(self.shm_budget, pool.size)),
            isolate=isolate,
            run_here=None if isolate else self._run_here,
            spare_core=self.workers < cpu_count(),
            warm=WarmPieces(self.warm),
            names=self.plan.source,
        )
        pool.work_of = dealer.work_of
        while True:
            dealer.set_depth(self.depth)  # prefetch("auto") may have deepened it
            dealer.deal()
            self.queue_depth = len(dealer.inflight)
            if not dealer.inflight:
                if dealer.exhausted:
                    return
                pool.wait_ready(self.timeout_s)  # isolated: nothing is dealt before then
                continue
            step, worker, task_id = dealer.inflight.popleft()
            if isinstance(step, EpochEnd):
                yield step
            elif worker is None:
                if task_id in dealer.stolen:
                    piece = dealer.stolen.pop(task_id)
                else:  # no worker has a chunk yet: their cores may help with this one
                    piece = self._run_here(step, 1 if any(dealer.queued) else pool.size + 1)
                if isinstance(piece, Exception):
                    raise piece
                yield piece
            else:
                answer = dealer.answer(worker, task_id, self._deadline(pool, worker))
                yield self._received(pool, dealer, step, worker, answer)

    def _run_here(self, chunk: Chunk, threads: int = 1) -> Piece:
        if self._local is None:
            self._local = ChunkRunner(self.plan, self.clock)
        return self._local.run_chunk(chunk, min(threads, cpu_count()))

    def _deadline(
        self, pool: WorkerPool, worker: int
    ) -> Callable[[], InputTimeoutError | None] | None:
        """With a timeout: a check that names where `worker` is once the wait is too long."""
        if self.timeout_s is None:
            return None
        limit, started = self.timeout_s, now()
        labels = labels_of(self.plan)

        def check() -> InputTimeoutError | None:
            if now() - started < limit:
                return None
            beacon = beacon_at(pool.beacons, worker, labels)
            return timed_out(
                limit, f"worker {worker} (pid {pool.pids[worker]})", beacon, self.plan.source
            )

        return check

    def _received(
        self, pool: WorkerPool, dealer: _Dealer, chunk: Chunk, worker: int, answer: Answer | Failure
    ) -> Piece:
        if isinstance(answer, Failure):
            raise rebuild_error(answer.fields, worker)
        self.shares.add(worker, answer, self.clock)  # the run's times and counts, and the worker's
        payload = answer.payload
        if answer.slot is not None:
            started = now()
            segment = pool.slot_maps.buffer(worker, answer.slot, answer.new_segment)
            if answer.new_segment is not None:  # the slot's old segment, if any, is gone now
                pool.send_released(worker)
                share = dealer.leases.share
                dealer.tight = share is not None and len(segment) * self.slots_per_worker > share
            if answer.elements:  # unbatched elements: views of one copy of the slot
                payload = read_elements(payload, segment)
                dealer.free(worker, answer.slot)
            elif answer.final and dealer.leases.can_lend(worker, len(segment)):
                # A finished batch goes to the consumer as is: lent, not copied.
                base = dealer.leases.lend(worker, answer.slot, segment, len(segment))
                payload = read_batch(payload, base, copy=False)
            else:  # pieces are joined in this process; and past the cap the consumer holds
                payload = read_batch(payload, segment)
                dealer.free(worker, answer.slot)
            self.clock.add("transfer", now() - started, answer.size)
        return Piece(
            chunk,
            payload,
            answer.size,
            answer.units,
            answer.outs,
            answer.last,
            [rebuild_error(fields, worker) for fields in answer.skipped],
            answer.final,
        )
