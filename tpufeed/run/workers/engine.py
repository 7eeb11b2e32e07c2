"""WorkerExecutor: a run's chunks run in worker processes.

The walk and the chunk runner are the in-process executor's (tpufeed.run.executor); only where
chunks run differs. Answers are consumed in task order, so the output is the same item for
item as with no workers; they are received as they come (`dealer.py` deals the chunks and
collects the answers). Batched pipelines' pieces are
stacked by the worker straight into a shared-memory slot; where a chunk is exactly one batch
(counts cannot depend on the data) the worker finishes the batch whole, and the consumer gets it
as views of that slot, lent until it drops them (`leases.py`): the parent copies nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tpufeed.errors import InputTimeoutError
from tpufeed.observe import timeline
from tpufeed.ops.base import Chunk, EpochEnd, Piece, Reread, StageClock, now
from tpufeed.order.cursor import Cursor
from tpufeed.run.chunks import ChunkRunner, WarmPiece, WarmPieces, reread
from tpufeed.run.plan import Plan
from tpufeed.run.resources import cpu_count
from tpufeed.run.walk import walk
from tpufeed.run.watch import beacon_at, labels_of, timed_out
from tpufeed.run.workers.budget import shm_budget, worker_share
from tpufeed.run.workers.dealer import Dealer
from tpufeed.run.workers.failures import rebuild_error
from tpufeed.run.workers.init_hook import WorkerInit, init_here
from tpufeed.run.workers.layout import read_batch, read_elements
from tpufeed.run.workers.leases import Leases
from tpufeed.run.workers.liveness import STOPPED_S
from tpufeed.run.workers.messages import Answer, Failure
from tpufeed.run.workers.pool import WorkerPool
from tpufeed.run.workers.shares import WorkerShares, WorkerStats
from tpufeed.run.workers.slots import segment_prefix

_KEPT_BY_CONSUMER = 4  # batches a training loop may hold past its step and still get lent


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
    warm: tuple[WarmPiece, ...] = ()  # the first chunks' pieces, made by the "auto" warm-up
    worker_init: WorkerInit | None = None  # workers(n, init=fn): each worker calls it first

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
                "worker_init": self.worker_init,
            }
            prefix = segment_prefix(uuid.uuid4().hex[:8])
            self._pool = WorkerPool(init, self.workers, prefix, self.stopped_s)
            _name_tracks(self._pool)
        return self._pool

    def reread(self) -> Reread:
        init_here(self.worker_init, self.workers)
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
        dealer = Dealer(
            pool,
            walk(self.plan, self.cursor),
            self.slots_per_worker,
            Leases(pool.size, self.lend_per_worker, worker_share(self.shm_budget, pool.size)),
            isolate=isolate,
            run_here=None if isolate else self._run_here,
            spare_core=self.workers < cpu_count(),
            warm=WarmPieces(self.warm, self.clock),
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
            init_here(self.worker_init, self.workers)  # the first chunk this process makes
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
        self, pool: WorkerPool, dealer: Dealer, chunk: Chunk, worker: int, answer: Answer | Failure
    ) -> Piece:
        if isinstance(answer, Failure):
            raise rebuild_error(answer.fields, worker)
        self.shares.add(worker, answer, self.clock)  # the run's times and counts, and the worker's
        payload = answer.payload
        if answer.slot is not None:
            started = now()
            try:
                segment = pool.slot_maps.buffer(worker, answer.slot, answer.new_segment)
            except FileNotFoundError as gone:
                raise pool.segment_lost(worker, str(gone.filename)) from None
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


def _name_tracks(pool: WorkerPool) -> None:
    """Names every worker's process track in the recording, if one runs: a worker that gets no
    chunk (the run was short, or it started late) still shows, idle."""
    recording = timeline.recording()
    if recording is not None:
        for index, pid in enumerate(pool.pids):
            if pid is not None:
                recording.name_process(pid, f"tpufeed worker {index}")
