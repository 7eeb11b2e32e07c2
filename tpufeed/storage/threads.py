"""Running one call per item on a few threads, stopping at the first failure.

`ThreadPoolExecutor.map` inside a `with` runs every queued call before the failure reaches the
caller: counting 1,000 gs:// shards against a server that never answers would wait for each in
turn. Here the calls not started are cancelled, and only those running are waited for (each
bounded by its own timeout), before the first failure is raised.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import TypeVar

__all__ = ["map_in_threads"]

T = TypeVar("T")
R = TypeVar("R")


def map_in_threads(fn: Callable[[T], R], items: Sequence[T], threads: int) -> list[R]:
    """`[fn(item) for item in items]`, on up to `threads` threads; the first failure (in item
    order among those that failed) is raised once the calls already running have ended."""
    if len(items) <= 1 or threads <= 1:
        return [fn(item) for item in items]
    pool = ThreadPoolExecutor(min(threads, len(items)))
    try:
        futures = [pool.submit(fn, item) for item in items]
        wait(futures, return_when=FIRST_EXCEPTION)
        for future in futures:
            if future.done() and not future.cancelled() and future.exception() is not None:
                raise future.exception()  # type: ignore[misc]
        return [future.result() for future in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
