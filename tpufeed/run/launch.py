"""Starting a run: the settings of a pipeline decide its executor, and nothing else.

`RunSettings` are the pipeline-wide choices of `Dataset.workers`, `.prefetch` and `.options`,
checked when they are made; `launcher` turns a plan and its settings into what
`DatasetIterator` starts runs with: a state is read and checked first (tpufeed.run.resume),
then the run is made, in worker processes, in this process (on a prefetch thread where
asked), or as a mixture, and wrapped so that the hosts end together where asked
(tpufeed.run.hosts.uneven).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tpufeed.errors import InvalidArgumentError
from tpufeed.ops.base import Counters, StageClock
from tpufeed.run.autotune import AUTO, MAX_PREFETCH, Options, choose
from tpufeed.run.executor import Executor, InProcessExecutor
from tpufeed.run.hosts import pod
from tpufeed.run.hosts.agreement import HostAgreement
from tpufeed.run.hosts.uneven import check_uneven, end_together
from tpufeed.run.iterator import Launch, Run
from tpufeed.run.mixture import MixtureExecutor
from tpufeed.run.pipeline_run import PipelineRun
from tpufeed.run.plan import MixPlan, Plan, StreamPlan
from tpufeed.run.resume import Start, resume
from tpufeed.run.watch import Beacon, labels_of
from tpufeed.run.workers.init_hook import NO_MIXTURE_INIT, WorkerInit, init_here


@dataclass(frozen=True)
class RunSettings:
    """Where a pipeline's chunks run and how far ahead: `workers` and `prefetch` (a number, or
    "auto"), `isolate` (no chunk in this process), `options` (RAM budget, timeout), and
    `worker_init`, called in each process that makes elements (tpufeed.run.workers.init_hook)."""

    workers: int | str = 0
    prefetch: int | str = 0
    isolate: bool = False
    options: Options = field(default_factory=Options)
    worker_init: WorkerInit | None = None

    def __post_init__(self) -> None:
        for name, n in (("workers", self.workers), ("prefetch", self.prefetch)):
            if n != AUTO and (not isinstance(n, int) or isinstance(n, bool) or n < 0):
                raise InvalidArgumentError(
                    f"{name} must be a non-negative int or 'auto', got {n!r}"
                )
        if not isinstance(self.isolate, bool):
            raise InvalidArgumentError(f"isolate must be True or False, got {self.isolate!r}")
        if self.isolate and self.workers == AUTO:
            raise InvalidArgumentError(
                "workers('auto') measures a warm-up in this process; with "
                "isolate=True give a number of workers"
            )


def launcher(
    plan: StreamPlan,
    settings: RunSettings,
    uneven: str | None,
    agreement: HostAgreement | None,
    template: Callable[[], Any],
) -> Launch:
    """What `DatasetIterator` starts its runs with, from any state of `plan`. `template` makes
    an item to pad from, for `uneven="pad"`."""
    check_uneven(uneven)

    def launch(state: Any) -> Callable[[], Run]:
        start = resume(plan, state)  # a bad state fails here, before any work
        pod.share(settings.options.pod_interval_s)  # where this is one host of several
        return lambda: end_together(
            lambda: start_run(plan, start, settings),
            plan,
            start.position,
            uneven,
            agreement,
            template,
        )

    return launch


def start_run(plan: StreamPlan, start: Start, settings: RunSettings) -> PipelineRun:
    """A run of `plan` from `start`, its executor chosen by `settings`."""
    if isinstance(plan, MixPlan):
        return _mixture_run(plan, start, settings)
    if not isinstance(plan, Plan):
        raise TypeError(f"no run for a {type(plan).__name__}")
    timeout_s, log_every_s = settings.options.timeout_s, settings.options.log_every_s
    tuning = None
    if isinstance(settings.workers, int) and isinstance(settings.prefetch, int):
        workers, prefetch = settings.workers, settings.prefetch
    else:  # "auto": measured, in this process
        init_here(settings.worker_init, 0)
        tuning = choose(plan, start.position, settings.workers, settings.prefetch, settings.options)
        workers, prefetch = tuning.workers, tuning.prefetch
    adapt, warm = settings.prefetch == AUTO, tuning.warm if tuning is not None else ()
    position = start.position
    if workers > 0:
        from tpufeed.run.workers.engine import WorkerExecutor  # imported when workers run

        def in_workers(counters: Counters, clock: StageClock) -> Executor:
            return WorkerExecutor(
                plan,
                position,
                workers,
                prefetch,
                clock,
                max_prefetch=MAX_PREFETCH if adapt else prefetch,
                isolate=settings.isolate,
                timeout_s=timeout_s,
                stopped_s=settings.options.stopped_s,
                shm_budget_bytes=settings.options.shm_budget_bytes,
                warm=warm,
                worker_init=settings.worker_init,
            )

        return PipelineRun(
            plan, start, in_workers, prefetch, workers, tuning, adapt, timeout_s, None, log_every_s
        )
    beacon = None
    if timeout_s is not None:  # the work leaves this thread, so a wait can end
        beacon = Beacon(labels_of(plan))
        prefetch = max(1, prefetch)

    def here(counters: Counters, clock: StageClock) -> Executor:
        init_here(settings.worker_init, 0)  # before this process makes its first element
        return InProcessExecutor(plan, position, clock, beacon, warm)

    return PipelineRun(
        plan, start, here, prefetch, 0, tuning, adapt, timeout_s, beacon, log_every_s
    )


def _mixture_run(plan: MixPlan, start: Start, settings: RunSettings) -> PipelineRun:
    """A mixture's run: its workers run inside its components."""
    if not isinstance(settings.workers, int) or not isinstance(settings.prefetch, int):
        raise InvalidArgumentError("a mixture takes a number of workers and prefetch, not 'auto'")
    if settings.options.timeout_s is not None:
        raise InvalidArgumentError("options(timeout_s=...) does not watch a mixture yet")
    if settings.worker_init is not None:
        raise InvalidArgumentError(NO_MIXTURE_INIT)

    def mixture(counters: Counters, clock: StageClock) -> Executor:
        options = settings.options
        return MixtureExecutor(
            plan, start.position, counters, clock, options.stopped_s, options.shm_budget_bytes
        )

    return PipelineRun(
        plan, start, mixture, settings.prefetch, log_every_s=settings.options.log_every_s
    )
