"""DatasetIterator: hands out items in order and knows exactly what the consumer has received.

`DatasetIterator` is what `Dataset.iterator()` returns: `get_state()` and `set_state(state)`
over one run of the pipeline (`PipelineRun`, or the run wrapped so that hosts end together).
`set_state` checks the state, stops the run (workers, prefetch) and starts a new one there.
"""

from __future__ import annotations

import atexit
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from tpufeed.observe import profiler, timeline
from tpufeed.observe.trace_file import TraceFile
from tpufeed.run.hosts.clock_offset import measure_in_background
from tpufeed.run.resume import reweighable
from tpufeed.run.state_names import TorchStateNames
from tpufeed.run.stats import PipelineStats


class Run(Protocol):
    """One run of a pipeline from a start position: what DatasetIterator delegates to."""

    def __next__(self) -> Any: ...
    def start(self) -> None: ...
    def get_state(self) -> dict[str, Any]: ...
    def stats(self) -> PipelineStats: ...
    def close(self) -> None: ...
    @property
    def records_delivered(self) -> int: ...
    @property
    def dropped_records(self) -> int: ...
    @property
    def epoch(self) -> int: ...


# A state -> a run's launcher: checks the state (raising StateError before anything starts),
# and returns what starts the run there.
Launch = Callable[[Any], Callable[[], Run]]


class DatasetIterator(TorchStateNames, Iterator[Any]):
    """Iterator over a Dataset. `get_state()` describes what `__next__` has returned so far;
    `set_state(state)` continues right after `state` (one host's, or the list of all hosts').
    `state_dict()` / `load_state_dict(state)` are the same under torch's names.

    >>> it = iter(tpufeed.Dataset.from_sequence(range(10)).batch(4))   # doctest: +SKIP
    >>> next(it); state = it.get_state(); next(it)                      # doctest: +SKIP
    >>> it.set_state(state)     # the next batch is the second one again  # doctest: +SKIP
    """

    def __init__(
        self, launch: Launch, state: Any = None, trace: Any = None, allow_new_weights: bool = False
    ):
        """`trace`: a file to write the timeline of this iterator's runs to (`options(trace=)`):
        recorded from now (the workers' included), written when the iterator ends, fails or
        closes, and again after each `set_state` (each write holds all recorded before it)."""
        self._launch = launch
        self._lock = threading.Lock()
        self._closed = True  # until the first run starts
        self._trace = TraceFile(trace) if trace is not None else None
        self._run: Run = self._start(launch(reweighable(state, allow_new_weights)))
        self._closed = False
        _open.add(self)

    def _start(self, run: Callable[[], Run]) -> Run:
        """`run` started, recorded from before its workers start where a trace is asked (and,
        in a multi-host run, this host's clock measured against process 0's, once, on a
        thread: `tpufeed trace merge` aligns the hosts' files by it)."""
        if self._trace is not None:
            self._trace.begin()
        if timeline.recording() is not None:
            measure_in_background()
        if self._trace is None:
            return run()
        try:
            return run()
        except BaseException:
            self._trace.end()
            raise

    def __iter__(self) -> DatasetIterator:
        return self

    def __next__(self) -> Any:
        with self._lock:  # threads sharing one iterator each get whole items, in turn
            if self._closed:
                raise StopIteration
            spans = profiler.check()  # the one check per item: does a profiler record?
            try:
                if spans is None:
                    return next(self._run)
                with spans("next", "wait"):
                    return next(self._run)
            except BaseException:  # the end, or an error: the run has stopped
                if self._trace is not None:  # the file is written now
                    self.close()
                raise

    def start(self) -> None:
        """Begins making batches now, before the first `next()` (Grain's `start_prefetch`):
        right after `ds.iterator(state)` or `set_state(state)`, call it, then restore the
        model, and the first batch is made meanwhile. Within the budgets: the first `prefetch`
        batches (at least one) are made on a thread, which deals workers their chunks as
        `next()` would (within `prefetch` and the shared-memory budget); a prefetch thread in
        this process, where there is one, already runs from the iterator's start. What `next()` returns and what `get_state()` says do not change. Idempotent; does
        nothing once a batch was taken, or on a closed iterator (`set_state` stops what it
        began: call it again after). Orbax's `CheckpointRestore` calls it.

        >>> it = ds.iterator(saved); it.start()       # doctest: +SKIP
        >>> params = restore_model()                    # the first batch is made meanwhile  # doctest: +SKIP
        """
        with self._lock:
            if not self._closed:
                self._run.start()

    def get_state(self) -> dict[str, Any]:
        """A small JSON-able dict; `ds.iterator(state)` or `set_state(state)` resumes right
        after the last item returned."""
        with self._lock:
            return self._run.get_state()

    def set_state(self, state: Any, allow_new_weights: bool = False) -> None:
        """Continues right after `state` (as `Dataset.iterator(state)` would): the state is
        checked first (StateError leaves this iterator as it was), then the running workers
        and prefetch stop, and nothing they made ahead is delivered. Works on a closed or
        finished iterator too. In a multi-host run every host calls it at the same step.
        `allow_new_weights`: as in `Dataset.iterator` (a mixture's state, into other weights)."""
        with self._lock:
            launch = self._launch(reweighable(state, allow_new_weights))
            self.close()
            self._run = self._start(launch)
            self._closed = False

    def stats(self) -> PipelineStats:
        """Per-stage times and rates, the consumer's wait, queue depth and memory, since the
        iterator (or the last `set_state`) started."""
        return self._run.stats()

    @property
    def records_delivered(self) -> int:
        """Records in the items returned so far (batch sizes summed), since the start or the
        last `set_state`."""
        return self._run.records_delivered

    @property
    def dropped_records(self) -> int:
        """Records dropped by `batch(drop_remainder=True)` (and by hosts ending together) at
        the end of this host's epochs so far."""
        return self._run.dropped_records

    def close(self) -> None:
        """Stops background work. Safe to call more than once."""
        if not self._closed:
            self._closed = True
            try:
                self._run.close()
            finally:
                if self._trace is not None:  # the timeline so far, the workers' last included
                    self._trace.end()

    def __enter__(self) -> DatasetIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.close()


_open: weakref.WeakSet[DatasetIterator] = weakref.WeakSet()


@atexit.register
def _close_open_iterators() -> None:
    """Closes the iterators a script left open before its modules are torn down: closed by
    `__del__` during that teardown, one found tpufeed's functions gone and printed a
    traceback at exit (a script that imported torch)."""
    for it in list(_open):
        it.close()
