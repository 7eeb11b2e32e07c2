"""`Dealer`: hands a run's chunks to its workers and collects their answers (for
`engine.WorkerExecutor`, which consumes them in order).

A worker is given a task when it has fewer than two unanswered and a free slot for the answer,
so one that falls behind (descheduled, slower records) gets fewer tasks and never holds the
others up. Until a worker has started, and where the parent would otherwise wait, the parent
runs chunks itself (`steal`); their pieces wait their turn like the workers' answers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tpufeed.ops.base import Chunk, EpochEnd, Piece
from tpufeed.run.chunks import WarmPieces
from tpufeed.run.watch import beacon_at
from tpufeed.run.workers.failures import making, rebuild_error
from tpufeed.run.workers.leases import Leases
from tpufeed.run.workers.messages import Answer, Failure, encode_free, encode_task
from tpufeed.run.workers.pool import WorkerPool

_QUEUED_PER_WORKER = 2  # one task running, one waiting, so a worker never waits for the parent


@dataclass
class Dealer:
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
    sent: dict[int, tuple[int, Chunk]] = field(default_factory=dict)  # unanswered: (worker, chunk)
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
        """ " while making the chunk of records a..b (the first: where)", for an error that names
        what a lost `worker` was making: the chunk its beacon says it took, while unanswered;
        else the first one sent to it and not answered (the one it was to take next)."""
        taken = beacon_at(self.pool.beacons, worker, []).task()
        sent = self.sent.get(taken) if taken is not None else None
        if sent is None or sent[0] != worker:
            sent = next((s for s in self.sent.values() if s[0] == worker), None)
        return making(sent[1], self.names) if sent is not None else ""

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
        self.sent[task_id] = (worker, chunk)
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
                self.sent.pop(message.task_id, None)
                self.queued[sender] -= 1
                self.answered.add(sender)
            self.deal()
        self.held[worker] -= 1
        return self.answers.pop(task_id)
