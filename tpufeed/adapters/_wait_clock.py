"""How long a training loop waits for its input, against the time it runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from tpufeed.run import live

T = TypeVar("T")


class WaitClock:
    """Times the consumer's calls for the next batch.

    The window opens when the second batch is handed over: start-up (workers starting, the
    first batch) and the loop's first step (where a jitted step compiles) do not count; the
    first is reported apart as `time_to_first_batch`. `wait_fraction` is the time blocked
    waiting for batches 3..n (and for the end of the data) over the wall time of the window.
    """

    def __init__(self) -> None:
        self._created = time.perf_counter()
        self._opened: float | None = None
        self._last: float | None = None
        self.wait_seconds = 0.0
        self.batches = 0  # handed over, in all
        self.window_batches = 0  # handed over inside the window
        self.time_to_first_batch: float | None = None

    def call(self, fetch: Callable[[], T]) -> T:
        """Runs `fetch()` (which may raise StopIteration) and counts the time it blocked."""
        started = time.perf_counter()
        try:
            item = fetch()
        finally:
            now = time.perf_counter()
            if self._opened is not None:
                self.wait_seconds += now - started
                self._last = now
                live.loop_waited(now - started)  # what the pod's summary reads
        self.batches += 1
        if self._opened is not None:
            self.window_batches += 1
        elif self.batches == 1:
            self.time_to_first_batch = now - self._created
        else:
            self._opened = self._last = now
        return item

    @property
    def wall_seconds(self) -> float:
        """Seconds from the second batch handed over to the latest call's return."""
        if self._opened is None or self._last is None:
            return 0.0
        return self._last - self._opened

    @property
    def wait_fraction(self) -> float:
        """Share of the loop's wall time spent blocked on input (0.0 before the third batch)."""
        wall = self.wall_seconds
        return min(1.0, self.wait_seconds / wall) if wall > 0 else 0.0
