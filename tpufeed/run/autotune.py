"""Choosing the worker count and prefetch depth: a short measured warm-up, within a RAM budget.

`ds.workers("auto")` / `ds.prefetch("auto")` run the first few tasks of the plan in this
process, measuring the CPU cost per record and the bytes per batch, then pick the settings the
budget allows. While running, the prefetch depth grows when the consumer keeps waiting.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from tpufeed.errors import InvalidArgumentError
from tpufeed.observe.trace_file import trace_path
from tpufeed.ops.base import StageClock, now
from tpufeed.order.cursor import Cursor
from tpufeed.run.plan import Plan
from tpufeed.run.resources import available_memory, cpu_count
from tpufeed.run.workers.liveness import STOPPED_S

AUTO = "auto"
WORKER_BYTES = 80 << 20  # resident size of one idle worker process (interpreter + numpy + tpufeed)
_MIN_TASK_SECONDS = 0.0015  # below this per batch, worker IPC costs more than it saves
# Below this per batch, one worker fewer than cores is faster: the parent has a core of its own
# for its serial part (hand-off, pack, batch) and fills the rest of it by running chunks itself
# whenever it would wait, and in-order delivery waits on such a chunk for a few ms at most.
# Measured on 2 cores (benchmarks/RESULTS.md, sessions 15-16): W1 (4.8 ms a batch in the warm-up)
# 1 worker 1.13x 2 workers, W3 (3.8 ms) 1.19x; W2 (17 ms), where the parent is mostly idle,
# 2 workers 1.15x 1 worker on session 15's machine and 0.96x on session 16's.
_SHORT_TASK_SECONDS = 0.010
_WARMUP_SECONDS = 0.25
_WARMUP_TASKS = 4
MAX_PREFETCH = 16
POD_INTERVAL_S = 30.0  # how often a host of several shares its summary (tpufeed.run.hosts.pod)
TracePath = str | os.PathLike[str] | None  # where an iterator writes its timeline (or not)


@dataclass(frozen=True)
class Options:
    """Pipeline-wide settings. `ram_budget_bytes`: memory the pipeline may add (buffers and
    worker processes); default half of the memory available when the iterator starts.
    `timeout_s`: the longest `next()` waits for an item (None: no limit). `stopped_s`: the
    longest the iterator waits for a stopped worker (SIGSTOP) before raising (None: no limit).
    `shm_budget_bytes`: what workers' batch slots may hold in shared memory together (None:
    half of the space free in /dev/shm when the iterator starts). `log_every_s`: a line on
    the `tpufeed` logger this often (rate, wait, bottleneck, cache hits; None: never).
    `trace`: a file each iterator writes its timeline to (tpufeed.observe.trace_file), or None.
    `pod_interval_s`: on a run of several hosts, how often this host shares the summary of its
    input with the others (tpufeed.run.hosts.pod; None: never)."""

    ram_budget_bytes: int | None = None
    timeout_s: float | None = None
    stopped_s: float | None = STOPPED_S
    shm_budget_bytes: int | None = None
    log_every_s: float | None = None
    trace: TracePath = None
    pod_interval_s: float | None = POD_INTERVAL_S

    def __post_init__(self) -> None:
        if self.trace is not None:
            trace_path(self.trace, "options(trace=...)")
        for name in ("timeout_s", "stopped_s", "log_every_s", "pod_interval_s"):
            seconds = getattr(self, name)
            if seconds is not None and (
                isinstance(seconds, bool)
                or not isinstance(seconds, (int, float))
                or not seconds > 0
            ):
                raise InvalidArgumentError(
                    f"{name} must be a positive number of seconds or None, got {seconds!r}"
                )
        for name in ("ram_budget_bytes", "shm_budget_bytes"):
            budget = getattr(self, name)
            if budget is not None and (
                not isinstance(budget, int) or isinstance(budget, bool) or budget < 0
            ):
                raise InvalidArgumentError(f"{name} must be a non-negative int, got {budget!r}")

    def budget(self) -> int:
        return (
            self.ram_budget_bytes if self.ram_budget_bytes is not None else available_memory() // 2
        )


@dataclass(frozen=True)
class Tuning:
    """The chosen settings and what they were chosen from (shown in the statistics)."""

    workers: int
    prefetch: int
    seconds_per_record: float
    batch_bytes: int
    budget_bytes: int
    reason: str
    # The warm-up's pieces, each with its stage times (`run.chunks.WarmPiece`).
    warm: tuple[Any, ...] = field(default=(), repr=False, compare=False)

    def buffer_bytes(self, workers: int | None = None, prefetch: int | None = None) -> int:
        w = self.workers if workers is None else workers
        p = self.prefetch if prefetch is None else prefetch
        return pipeline_bytes(w, p, self.batch_bytes)


def pipeline_bytes(workers: int, prefetch: int, batch_bytes: int) -> int:
    """Memory a setting adds: batches in flight (parent copies and worker slots) and workers."""
    if workers == 0:
        return prefetch * batch_bytes
    in_flight = max(1, prefetch) + 2 * workers
    slots = workers * (-(-in_flight // workers) + 1)
    return (in_flight + slots) * batch_bytes + workers * WORKER_BYTES


def measure(
    plan: Plan, cursor: Cursor, timeout_s: float | None = None
) -> tuple[float, int, tuple[Any, ...]]:
    """(CPU seconds per record, bytes per item, the pieces made, each with its stage times)
    over the first chunks from `cursor`.

    The warm-up's pieces are the iterator's first pieces: it hands them on rather than make
    them again (at most a few batches or a quarter of a second of work). With `timeout_s` it runs on a thread, and a warm-up
    still running after `timeout_s` raises `InputTimeoutError` naming its stage and record.
    """
    if timeout_s is None:
        return _measure(plan, cursor, None)
    import threading

    from tpufeed.run.watch import Beacon, labels_of, timed_out

    beacon = Beacon(labels_of(plan))
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(_measure(plan, cursor, beacon))
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller
            result.append(error)

    thread = threading.Thread(target=run, name="tpufeed-warm-up", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not result:
        raise timed_out(timeout_s, "the workers('auto') warm-up", beacon, plan.source)
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


def _measure(plan: Plan, cursor: Cursor, beacon: Any) -> tuple[float, int, tuple[Any, ...]]:
    from tpufeed.ops.base import Chunk
    from tpufeed.ops.stacking import flatten
    from tpufeed.run.chunks import ChunkRunner
    from tpufeed.run.walk import walk

    clock = StageClock()
    runner = ChunkRunner(plan, clock, beacon)
    records = tasks = item_bytes = 0
    pieces = []
    started = now()
    for step in walk(plan, cursor, announce=False):
        if tasks >= _WARMUP_TASKS or now() - started >= _WARMUP_SECONDS:
            break
        if not isinstance(step, Chunk):
            break  # the warm-up stays within the first epoch
        piece = runner.run_chunk(step)
        pieces.append((piece, clock.drain()))  # its times join the run's as it is taken
        items = [piece.payload] if plan.batch is not None else piece.payload
        if piece.size and items and items[0] is not None:
            size = sum(getattr(leaf, "nbytes", 64) for leaf in flatten(items[0])[1])
            per_item = size * step.count // piece.size if plan.batch is not None else size
            item_bytes = max(item_bytes, per_item)
        records += step.count
        tasks += 1
    return (now() - started) / records if records else 0.0, item_bytes, tuple(pieces)


def workers_for(task_seconds: float, cores: int, batch_bytes: int, budget: int) -> tuple[int, str]:
    """(workers, why) for batches of `task_seconds` of record work on `cores` cores: none when
    a batch is cheaper in-process than across processes; one fewer than cores when batches are
    short (the parent keeps a core and steals chunks with what it has left); one a core when
    they are long; never more than the RAM budget holds."""
    work = f"a batch takes {task_seconds * 1e3:.1f} ms of work"
    if task_seconds < _MIN_TASK_SECONDS or cores < 2:
        return 0, f"{work}: cheaper in-process than across workers"
    if task_seconds < _SHORT_TASK_SECONDS:
        workers, reason = (
            cores - 1,
            f"{work}: one core left to the parent, which runs chunks itself when it would wait",
        )
    else:
        workers, reason = cores, work
    fits = workers
    while fits and pipeline_bytes(fits, 2, batch_bytes) > budget:
        fits -= 1
    if fits < workers:
        reason += f"; {fits} workers fit the {budget:,} byte budget"
    return fits, reason


def choose(
    plan: Plan, cursor: Cursor, workers: int | str, prefetch: int | str, options: Options
) -> Tuning:
    """Settings for `auto` values; fixed values are kept as given."""
    budget = options.budget()
    per_record, batch_bytes, warm = measure(plan, cursor, options.timeout_s)
    task_seconds = per_record * plan.chunk
    cores = cpu_count()
    if workers == AUTO:
        chosen_workers, why = workers_for(task_seconds, cores, batch_bytes, budget)
    else:
        chosen_workers, why = int(workers), "set by the user"
    if prefetch == AUTO:
        chosen_prefetch, ahead = prefetch_for(chosen_workers, batch_bytes, budget)
    else:
        chosen_prefetch, ahead = int(prefetch), "set by the user"
    reason = f"workers {chosen_workers}: {why}; prefetch {chosen_prefetch}: {ahead}"
    return Tuning(chosen_workers, chosen_prefetch, per_record, batch_bytes, budget, reason, warm)


def prefetch_for(workers: int, batch_bytes: int, budget: int) -> tuple[int, str]:
    """(prefetch, why) for `auto`: 2 batches ahead without workers (one being made, one
    waiting), one a worker with them, fewer where the RAM budget holds fewer."""
    prefetch = 2 if workers == 0 else workers
    why = "2 batches ahead, in-process" if workers == 0 else "one batch ahead a worker"
    wanted = prefetch
    while prefetch and pipeline_bytes(workers, prefetch, batch_bytes) > budget:
        prefetch -= 1
    if prefetch < wanted:
        why += f", cut to {prefetch} by the {budget:,} byte budget"
    return prefetch, why
