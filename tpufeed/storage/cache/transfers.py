"""Parallel ranged transfers: one per-process pool of GET streams, most urgent request first.

A download is cut into parts that run as separate ranged GETs; all downloads of a process share
one pool of `STREAMS` threads, ordered by priority (the plan position of the shard's next use,
or `URGENT` for a read that is waiting now), so read-ahead never delays a reader that blocks.

>>> download(obj, fd, priority=URGENT)  # doctest: +SKIP
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, wait
from functools import partial
from typing import Any

from tpufeed.storage.backends import fetch_into, read_range
from tpufeed.storage.objects import RemoteObject
from tpufeed.storage.retry import RetryPolicy

__all__ = ["URGENT", "PriorityPool", "coalesce", "download", "read_ranges"]

URGENT = -1.0
STREAMS = 16  # concurrent GETs per process
PART_BYTES = 8 << 20  # a download is split into parts of this size (each held in memory once)


class PriorityPool:
    """Daemon threads running submitted calls, lowest priority value first (FIFO on ties)."""

    def __init__(self, threads: int):
        self._threads = threads
        self._heap: list[tuple[float, int, Future, Callable[[], Any]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._started = 0

    def submit(self, priority: float, fn: Callable[[], Any]) -> Future:
        future: Future = Future()
        with self._cond:
            heapq.heappush(self._heap, (priority, next(self._seq), future, fn))
            if self._started < self._threads:
                self._started += 1
                threading.Thread(target=self._run, name="tpufeed-gcs", daemon=True).start()
            self._cond.notify()
        return future

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                _, _, future, fn = heapq.heappop(self._heap)
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                future.set_exception(exc)


_pools: dict[int, PriorityPool] = {}
_pools_lock = threading.Lock()


def pool() -> PriorityPool:
    """This process's pool (a forked child gets its own: threads do not survive fork)."""
    pid = os.getpid()
    with _pools_lock:
        if pid not in _pools:
            _pools[pid] = PriorityPool(STREAMS)
        return _pools[pid]


def _run_all(calls: Sequence[Callable[[], Any]], priority: float) -> list[Any]:
    """Runs `calls` on the pool (the first in this thread) and returns their results in order.

    On a failure the calls not started are cancelled and the running ones awaited before it is
    raised: a part still writing into a file its caller has closed could hit a reused fd.
    """
    if len(calls) <= 1:
        return [call() for call in calls]
    futures = [pool().submit(priority, call) for call in calls[1:]]
    try:
        first = calls[0]()
        wait(futures, return_when=FIRST_EXCEPTION)
        for future in futures:
            error = future.exception() if future.done() and not future.cancelled() else None
            if error is not None:
                raise error
        return [first] + [f.result() for f in futures]
    finally:
        for future in futures:
            future.cancel()
        wait(futures)


def download(
    obj: RemoteObject, fd: int, priority: float, policy: RetryPolicy, part_bytes: int = PART_BYTES
) -> None:
    """Writes the whole of `obj` into `fd` (already sized), as parallel ranged GETs."""
    parts = [(start, min(start + part_bytes, obj.size)) for start in range(0, obj.size, part_bytes)]
    _run_all([partial(fetch_into, obj, s, e, fd, policy) for s, e in parts], priority)


def coalesce(
    spans: Sequence[tuple[int, int]], max_gap: int, max_span: int
) -> list[tuple[int, int]]:
    """Merges sorted [start, end) spans whose gap is at most `max_gap`, up to `max_span` each."""
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and start - merged[-1][1] <= max_gap and end - merged[-1][0] <= max_span:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(s, e) for s, e in merged]


def read_ranges(
    obj: RemoteObject,
    ranges: Sequence[tuple[int, int]],
    policy: RetryPolicy,
    priority: float = URGENT,
) -> list[bytes]:
    """The bytes of each [start, end) of `obj`, fetched in parallel."""
    return _run_all([partial(read_range, obj, s, e, policy) for s, e in ranges], priority)
