"""DatasetIterator: hands out items in order and knows exactly what the consumer has received."""

from __future__ import annotations

import atexit
import queue
import threading
import weakref
from collections.abc import Iterator
from typing import Any

from tpufeed.order import Cursor
from tpufeed.pipeline import Counters, Plan, Producer
from tpufeed.state import state_to_dict

_END = object()
_LIVE_PREFETCHERS: weakref.WeakSet = weakref.WeakSet()


class DatasetIterator(Iterator[Any]):
    """Iterator over a Dataset. `get_state()` describes what `__next__` has returned so far.

    >>> it = iter(tpufeed.Dataset.from_sequence(range(10)).batch(4))   # doctest: +SKIP
    >>> next(it); state = it.get_state()                                # doctest: +SKIP
    """

    def __init__(self, plan: Plan, cursor: Cursor, prefetch: int = 0, workers: int = 0):
        self._plan = plan
        self._cursor = cursor
        self._counters = Counters()
        self._prefetcher = None
        self._closed = True  # until construction succeeds
        if workers > 0:
            from tpufeed.workers.engine import ParallelProducer
            producer = ParallelProducer(plan, cursor, workers, prefetch, self._counters)
            self._items = producer.items(producer.start())
        else:
            self._items = Producer(plan, cursor, self._counters).items()
            if prefetch > 0:
                self._prefetcher = _ThreadPrefetcher(self._items, prefetch)
        self._closed = False

    def __iter__(self) -> DatasetIterator:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        if self._prefetcher is not None:
            item, cursor = self._prefetcher.get()
        else:
            item, cursor = next(self._items)
        self._cursor = cursor
        return item

    def get_state(self) -> dict[str, Any]:
        """A small JSON-able dict; `ds.iterator(state)` resumes right after the last item returned."""
        return state_to_dict(self._cursor, self._plan.fingerprint)

    @property
    def dropped_records(self) -> int:
        """Records dropped by `batch(drop_remainder=True)` at the end of this host's epochs so far."""
        return self._counters.dropped_records

    def close(self) -> None:
        """Stops background work. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        if self._prefetcher is not None:
            self._prefetcher.close()
        else:
            self._items.close()

    def __enter__(self) -> DatasetIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


class _ThreadPrefetcher:
    """Runs a generator on a thread, up to `depth` items ahead; errors re-raise in the consumer."""

    def __init__(self, items: Iterator[Any], depth: int):
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=_fill, args=(items, self._queue, self._stop),
                                        name="tpufeed-prefetch", daemon=True)
        self._thread.start()
        self._done = False
        _LIVE_PREFETCHERS.add(self)

    def get(self) -> Any:
        if self._done:
            raise StopIteration
        kind, value = self._queue.get()
        if kind is _END:
            self._done = True
            raise StopIteration
        if kind is BaseException:
            self._done = True
            raise value
        return value

    def close(self) -> None:
        self._stop.set()
        while self._thread.is_alive():
            try:  # unblock a producer waiting on a full queue
                self._queue.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(timeout=0.05)


def _fill(items: Iterator[Any], out: queue.Queue, stop: threading.Event) -> None:
    try:
        for item in items:
            while not stop.is_set():
                try:
                    out.put((None, item), timeout=0.1)
                    break
                except queue.Full:
                    continue
            if stop.is_set():
                return
        _put(out, (_END, None), stop)
    except BaseException as exc:  # noqa: BLE001 - handed to the consumer
        _put(out, (BaseException, exc), stop)
    finally:
        items.close()


def _put(out: queue.Queue, entry: tuple, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            out.put(entry, timeout=0.1)
            return
        except queue.Full:
            continue


@atexit.register
def _stop_prefetch_threads() -> None:
    """Stops prefetch threads before the interpreter tears down the readers they are using
    (a C++ reader destroyed under a running daemon thread aborts the process)."""
    for prefetcher in list(_LIVE_PREFETCHERS):
        prefetcher.close()
