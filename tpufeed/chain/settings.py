"""Where and how the pipeline runs: `workers`, `prefetch`, `options`, `ignore_errors`; settings
of the whole pipeline, whatever their place in the chain."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tpufeed.chain.base import Chain
from tpufeed.run.autotune import Options, TracePath
from tpufeed.run.plan import check_max_errors
from tpufeed.run.workers.liveness import STOPPED_S

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["SettingMethods"]


class SettingMethods(Chain):
    """`prefetch`, `options`, `ignore_errors` and `workers`: `tpufeed.Dataset` inherits them."""

    def prefetch(self, n: int | str) -> Self:
        """Keeps up to `n` items ready ahead of the consumer (0: produce on demand).

        `"auto"`: chosen from a short warm-up within the RAM budget, and deepened while the
        consumer keeps waiting.
        """
        return self._set(prefetch=n)

    def options(
        self,
        ram_budget_bytes: int | None = None,
        timeout_s: float | None = None,
        stopped_s: float | None = STOPPED_S,
        shm_budget_bytes: int | None = None,
        log_every_s: float | None = None,
        trace: TracePath = None,
    ) -> Self:
        """Pipeline-wide settings. `ram_budget_bytes` bounds what "auto" settings may use.

        `timeout_s`: `next()` waits at most this long for an item, then raises
        `InputTimeoutError` naming the stage and the record being worked on, and stops the
        workers. It watches reading and the element stages (and the batch stages workers run);
        to be able to stop them, no chunk runs in the calling thread (a prefetch thread with no
        workers, only workers with some). Off by default; not for `mix`.

        `stopped_s`: a stopped worker (SIGSTOP, SIGTSTP) or fork server is waited for this long
        (default 10 s; None: until it continues), then raises `WorkerError` naming it.
        `shm_budget_bytes`: the most /dev/shm the workers' batches hold at once, split evenly
        between them (default: half its free space); a batch over a share raises `WorkerError`.
        Every wait and its bound: docs/faults.md. `log_every_s`: a line on the `tpufeed` logger
        this often: rate, wait, bottleneck, cache hits (default: never; docs/metrics.md).
        `trace`: a file each iterator writes its timeline to (`tpufeed.trace`; docs/timeline.md).
        """
        settings = (ram_budget_bytes, timeout_s, stopped_s, shm_budget_bytes, log_every_s, trace)
        return self._set(options=Options(*settings))

    def ignore_errors(self, max_errors: int) -> Self:
        """Skips records whose read or transform fails, at most `max_errors` per iterator.

        Each skip is counted (`it.stats().errors`). The first three are logged with their file,
        record and cause, then one summary line at 10, 100, ... skips. The bad record after the
        last allowed one raises. Off by default: errors raise.
        """
        self._not_mixture("ignore_errors")
        check_max_errors(max_errors)
        return self._replace(_max_errors=max_errors)

    def workers(self, n: int | str, isolate: bool = False) -> Self:
        """Runs the element and batch stages in `n` worker processes (0: in this process).

        The output is the same item for item whatever `n`; functions may be lambdas or closures.
        `"auto"`: chosen from a short measured warm-up within the RAM budget (`options`).
        While workers start, the first chunks run in this process, for a fast first batch;
        `isolate=True` runs none here, so a crash in native code (a segfault in a decoder) can
        only take a worker down, at the cost of a first batch that waits for a worker to start
        (with a number of workers: "auto" measures its warm-up here).

        Asking for workers starts the process they are forked from (one per process, in the
        background, ~0.5 s of one core to import numpy and tpufeed), so that by the time the
        first batch is asked for (after the model is built and compiled) workers start in
        milliseconds. `TPUFEED_FORKSERVER=0` starts each worker as a fresh interpreter instead.
        """
        workers = self._set(workers=n, isolate=isolate)  # checks n and isolate
        if n:
            from tpufeed.run.workers.forkserver import shared_server

            shared_server()  # returns at once: its imports run while the caller goes on
        return workers
