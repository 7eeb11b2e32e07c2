"""The stages before the last one, over a chunk split between threads: the parent's first batch
while its workers are still cold.

Until a worker has taken a chunk, the parent makes the first batch alone, and the workers'
cores are idle. Where every one of those stages says it is thread-safe (`fn.thread_safe = True`,
as tpufeed's own transforms and `codec.decode` do), the chunk's elements are split into
contiguous parts, one a thread, and each part runs through the stages on its own thread with
its own context (its own generators and clock). The decoders release the GIL, so a first batch
of large photographs comes ~2x sooner on 2 cores.

The elements are the same as one thread's: every stage maps each element on its own, and the
randomness of `random_map` depends only on (seed, epoch, record, piece). A failure on any
thread is raised to the caller, which runs the chunk again on one thread: the error is then the
one a single thread raises first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from tpufeed.ops.base import Context, Elements, RecordStage, StageClock

__all__ = ["head_in_threads", "threadable"]


def threadable(stages: Sequence[RecordStage]) -> bool:
    """Whether every stage's function says it may run on several threads at once."""
    return all(stage.thread_safe for stage in stages)


def head_in_threads(
    read: Callable[[int, int], Elements],
    count: int,
    stages: Sequence[RecordStage],
    labels: list[str],
    context: Context,
    threads: int,
) -> Elements:
    """The chunk's `count` units through `stages`, in `threads` contiguous parts, one a thread
    (this one runs the first). `read(start, end)` reads units [start, end); it is called on this
    thread only, the last part first, so each thread starts as soon as its part is read. Times
    go to `context.clock`. Raises the first part's failure, if any."""
    bounds = [count * k // threads for k in range(threads + 1)]
    results: list[Any] = [None] * threads

    def work(k: int, part: Elements) -> None:
        own = Context(context.epoch, context.records, context.names, context.rng_seed, StageClock())
        try:
            for stage, label in zip(stages, labels):
                part = stage.run(part, own, label)
            results[k] = (part, own.clock)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, which reruns
            results[k] = exc

    helpers = []
    for k in range(threads - 1, 0, -1):
        part = read(bounds[k], bounds[k + 1])
        helper = threading.Thread(
            target=work, args=(k, part), name=f"tpufeed-first-batch-{k}", daemon=True
        )
        helper.start()
        helpers.append(helper)
    work(0, read(bounds[0], bounds[1]))
    for helper in helpers:
        helper.join()
    for result in results:
        if isinstance(result, BaseException):
            raise result
    values: list[Any] = []
    units: list[int] = []
    ids: list[int] | None = None if results[0][0].ids is None else []
    for part, clock in results:
        values += part.values
        units += part.units
        if ids is not None:
            ids += part.ids
        context.clock.merge(clock.drain())
    return Elements(values, units, ids)
