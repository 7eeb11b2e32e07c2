"""Executors decide where a run's chunks run; everything else about a run is the same.

An executor makes a plan's pieces, in order: `InProcessExecutor` runs each chunk in this
process, `WorkerExecutor` (tpufeed.run.workers.engine) in worker processes, `MixtureExecutor`
(tpufeed.run.mixture) interleaves the pieces of a mixture's components. The run
(tpufeed.run.iterator) streams the pieces of any of them through the same stream stages, with
the same bookkeeping of items, positions and counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from tpufeed.ops.base import Chunk, End, PieceLike, Reread, StageClock
from tpufeed.order.cursor import Cursor
from tpufeed.run.chunks import ChunkRunner, WarmPieces, reread
from tpufeed.run.plan import Plan
from tpufeed.run.stats import WorkerStats
from tpufeed.run.walk import walk


class Executor(Protocol):
    """Makes the pieces of a plan from a position, in order, wherever it runs their chunks."""

    def pieces(self) -> Iterator[PieceLike | End]:
        """The pieces, and an end after each epoch (or after the mixture)."""

    def reread(self) -> Reread:
        """Reads records again: what a stream stage that held elements restores from."""

    def close(self) -> None:
        """Stops whatever runs chunks (workers, their shared memory)."""

    def deepen(self, prefetch: int) -> None:
        """Keeps `prefetch` items ahead of the consumer, where the executor keeps any itself."""

    @property
    def worker_pids(self) -> list[int]: ...

    def worker_stats(self) -> tuple[WorkerStats, ...]:
        """Each worker process's share of the run so far (none where chunks run here)."""

    @property
    def shm_bytes(self) -> int:
        """Shared memory of the workers' batch slots mapped now, without waiting for a worker
        still being forked (as `worker_stats` and `worker_pids` do)."""

    @property
    def queue_depth(self) -> int:
        """Chunks dealt ahead of the consumer."""


class InProcessExecutor:
    """Runs each chunk of a walk in this process when its piece is asked for.

    `every` = (k, n) takes only the chunks k, k + n, k + 2n, ... of the walk: what DataLoader
    worker k of n makes (tpufeed.adapters.torch). `warm`: the first chunks' pieces, made by
    the "auto" warm-up; `beacon`: marks the stage and record being run, for a timeout.
    """

    def __init__(
        self,
        plan: Plan,
        cursor: Cursor,
        clock: StageClock,
        beacon: Any = None,
        warm: tuple[Any, ...] = (),
        every: tuple[int, int] | None = None,
    ):
        self.plan, self.cursor, self.clock = plan, cursor, clock
        self.runner = ChunkRunner(plan, clock, beacon)
        self.warm, self.every = warm, every

    def pieces(self) -> Iterator[PieceLike | End]:
        warm, run = WarmPieces(self.warm, self.clock), self.runner.run_chunk
        steps: Iterator[Chunk | End] = walk(self.plan, self.cursor)
        if self.every is not None:
            steps = every_nth(steps, *self.every)
        for step in steps:
            yield (warm.take(step) or run(step)) if isinstance(step, Chunk) else step

    def reread(self) -> Reread:
        return reread(self.plan, self.cursor.epoch, self.clock)

    def close(self) -> None:
        pass

    def deepen(self, prefetch: int) -> None:
        pass  # the run's prefetch thread keeps items ahead

    @property
    def worker_pids(self) -> list[int]:
        return []

    def worker_stats(self) -> tuple[WorkerStats, ...]:
        return ()

    @property
    def shm_bytes(self) -> int:
        return 0

    @property
    def queue_depth(self) -> int:
        return 0


def every_nth(steps: Iterator[Chunk | End], skip: int, every: int) -> Iterator[Chunk | End]:
    """The chunks `skip`, `skip + every`, ... of a walk (positions are computed for all, but
    only these are read). An epoch's end passes where this worker had a chunk of the epoch,
    or where the epoch had none: the stream then refuses an endless repeat of nothing, as the
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
