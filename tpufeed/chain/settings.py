"""Where and how the pipeline runs: `workers`, `prefetch`, `options`, `ignore_errors`; settings
of the whole pipeline, whatever their place in the chain."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, overload

from tpufeed.chain.base import Chain
from tpufeed.chain.tf_data import KEEP, UNBOUNDED_SKIPS, Keep, foreign_options
from tpufeed.errors import InvalidArgumentError
from tpufeed.run.autotune import AUTO, Options, TracePath
from tpufeed.run.workers.init_hook import WorkerInit, check_init

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["SettingMethods"]


class SettingMethods(Chain):
    """`prefetch`, `options`, `ignore_errors` and `workers`: `tpufeed.Dataset` inherits them."""

    def prefetch(self, n: int | str) -> Self:
        """Keeps up to `n` items ready ahead of the consumer (0: produce on demand).

        `"auto"`: chosen from a short warm-up within the RAM budget, and deepened while the
        consumer keeps waiting; `-1` (`tf.data.AUTOTUNE`) means the same.
        """
        return self._set(prefetch=AUTO if n == -1 and type(n) is int else n)

    @overload
    def options(self) -> Options: ...

    @overload
    def options(
        self,
        ram_budget_bytes: int | None | Keep = ...,
        timeout_s: float | None | Keep = ...,
        stopped_s: float | None | Keep = ...,
        shm_budget_bytes: int | None | Keep = ...,
        log_every_s: float | None | Keep = ...,
        trace: TracePath | Keep = ...,
        pod_interval_s: float | None | Keep = ...,
    ) -> Self: ...

    def options(
        self,
        ram_budget_bytes: int | None | Keep = KEEP,
        timeout_s: float | None | Keep = KEEP,
        stopped_s: float | None | Keep = KEEP,
        shm_budget_bytes: int | None | Keep = KEEP,
        log_every_s: float | None | Keep = KEEP,
        trace: TracePath | Keep = KEEP,
        pod_interval_s: float | None | Keep = KEEP,
    ) -> Self | Options:
        """Pipeline-wide settings: a new pipeline with those given changed, the others kept;
        with no argument, the settings in force (an `Options`, as tf.data's `options()`).

        `ram_budget_bytes` bounds what "auto" settings may use (default: half the memory
        available when the iterator starts).

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
        `pod_interval_s`: on a run of several hosts, how often each shares the summary of its
        input that `tpufeed.pod_stats()` reads and process 0 judges (default 30 s; None: never;
        docs/metrics.md).

        >>> ds = Dataset.from_sequence([1, 2]).options(timeout_s=30).options(log_every_s=60)
        >>> ds.options().timeout_s, ds.options().log_every_s
        (30, 60)
        """
        values: tuple[Any, ...] = (ram_budget_bytes, timeout_s, stopped_s, shm_budget_bytes)
        values += (log_every_s, trace, pod_interval_s)  # in the order of Options' fields
        names = [f.name for f in dataclasses.fields(Options)]
        given: dict[str, Any] = {
            name: value
            for name, value in zip(names, values, strict=True)
            if not isinstance(value, Keep)
        }
        if not given:
            return self._settings.options
        return self._set(options=dataclasses.replace(self._settings.options, **given))

    def with_options(self, options: Options) -> Self:
        """This pipeline with the settings of `options` (what `options()` of another pipeline
        gives), as tf.data's `with_options`. A `tf.data.Options` is refused, naming where each
        of its settings lives here."""
        if not isinstance(options, Options):
            raise InvalidArgumentError(foreign_options(options))
        return self._set(options=options)

    def ignore_errors(self, max_errors: int | None = None, log_warning: bool | None = None) -> Self:
        """Skips records whose read or transform fails, at most `max_errors` per iterator.

        Each skip is counted (`it.stats().errors`). The first three are logged with their file,
        record and cause, then one summary line at 10, 100, ... skips. The bad record after the
        last allowed one raises. Off by default: errors raise. tf.data's `ignore_errors()`,
        which skips without bound or count, is refused, naming `max_errors`; `log_warning` is
        tf.data's, and changes nothing here (skips are always logged).
        """
        self._not_mixture("ignore_errors")
        if max_errors is None:
            raise InvalidArgumentError(UNBOUNDED_SKIPS)
        check_max_errors(max_errors)
        if log_warning is not None and not isinstance(log_warning, bool):
            raise InvalidArgumentError(f"log_warning must be True or False, got {log_warning!r}")
        return self._replace(_max_errors=max_errors)

    def workers(self, n: int | str, isolate: bool = False, init: WorkerInit | None = None) -> Self:
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

        `init=fn`, as Grain's `worker_init_fn`: each worker calls `fn(worker_index,
        worker_count)` once, before its first element. Where this process makes elements itself
        (all of them with `workers(0)`, the first while workers start), it calls `fn(-1, n)`
        first, once; `isolate=True` keeps it to the workers. A failing `fn` raises `WorkerError`
        naming it (tpufeed.run.workers.init_hook).
        """
        if init is not None:
            self._not_mixture("workers(init=...)")
        workers = self._set(workers=n, isolate=isolate, worker_init=check_init(init))
        if n:
            from tpufeed.run.workers.forkserver import shared_server

            shared_server()  # returns at once: its imports run while the caller goes on
        return workers


def check_max_errors(max_errors: Any) -> None:
    """Raises unless `max_errors` can be a plan's count of bad records to skip."""
    if not isinstance(max_errors, int) or isinstance(max_errors, bool) or max_errors < 0:
        raise InvalidArgumentError(f"max_errors must be a non-negative int, got {max_errors!r}")
