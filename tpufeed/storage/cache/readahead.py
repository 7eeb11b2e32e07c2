"""Read-ahead for gs:// shards: fetch in plan order, evict the shard needed furthest in future.

The pipeline announces each new block of record indices it is about to read, in read order
(`Source.will_read`). Each announcement adds, per shard, the plan positions of its first and
last use in that block. Knowing where reading has got to ("now"), the read-ahead knows every
shard's *next use*, and:

- downloads missing shards soonest-needed first, `cache.downloads` at a time (each large one
  as parallel ranges, see `transfers`);
- makes room by evicting the cached shard whose next use is furthest away, and never one needed
  sooner than the shard it fetches: then it waits instead (Belady's rule on the known plan).

"Now" is the later of: the start of the block before the newest one (the pipeline announces a
block when it starts dealing it out, so reads of the previous block may still be in flight),
and the first use of the latest shard a reader opened since its use was announced (readers in
any process mark an entry when they read it, see `ShardCache.last_read_ns`). A shard being read
is pinned by its reader, so an early guess costs at most a download, never a wrong read.
"""

from __future__ import annotations

import heapq
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from tpufeed.storage.cache.eviction import PlanBoard, VictimChooser
from tpufeed.storage.cache.layout import entry_key
from tpufeed.storage.cache.shard_cache import ShardCache
from tpufeed.storage.objects import RemoteObject

__all__ = ["ReadAhead"]

log = logging.getLogger("tpufeed.cache")


class RemoteFile(Protocol):
    """What the read-ahead needs of a remote file (`storage.remote.RemoteFile`): its object
    version, and the shard cache that holds its copy."""

    @property
    def obj(self) -> RemoteObject: ...

    @property
    def cache(self) -> ShardCache: ...

    @property
    def url(self) -> str: ...


_RETRY_WAIT_S = 0.05  # after a shard found no room, fetching pauses this long
_PROGRESS_EVERY_S = 0.02  # how often readers' marks are checked and the plan is re-posted
_SWEEP_EVERY_S = 1.0
_IDLE_EXIT_S = 1.0


class ReadAhead:
    """Fetches the `files` (None: a local file) that announced blocks need, in need order."""

    def __init__(self, files: Sequence[RemoteFile | None], sweep: Callable[[], None] | None = None):
        self._files = {i: f for i, f in enumerate(files) if f is not None}  # the remote ones
        self._file_of_key = {entry_key(f.obj): i for i, f in self._files.items()}
        self._sweep = sweep
        # Per file, its uses in announced blocks: (first position, last position, announced at).
        self._uses: dict[int, deque[tuple[int, int, int]]] = {}
        self._announced = 0
        self._block_starts: deque[int] = deque(maxlen=2)
        self._now = 0
        self._heap: list[tuple[float, int]] = []
        self._queued: set[int] = set()
        self._cond = threading.Condition()
        self._running = 0  # threads alive; they end after _IDLE_EXIT_S with nothing to do
        self._observing = False
        self._closed = False
        self._paused_until = 0.0
        self._pressed = False  # the cache has been full: eviction order matters from now on
        self._last_progress = 0.0
        self._last_sweep = time.monotonic()
        self._board: PlanBoard | None = None
        self._board_name = PlanBoard.new_name()
        self._posted_now: int | None = None
        self.fetched = 0  # shards this read-ahead downloaded (for tests and stats)

    def announce(self, file_ids: np.ndarray) -> None:
        """The file of every record of the next block, in read order."""
        if file_ids.size == 0:
            return
        files, first = np.unique(file_ids, return_index=True)
        _, from_end = np.unique(file_ids[::-1], return_index=True)
        last = file_ids.size - 1 - from_end
        stamp = time.time_ns()
        with self._cond:
            base = self._announced
            self._block_starts.append(base)
            self._now = max(self._now, self._block_starts[0])
            self._announced = base + int(file_ids.size)
            for f, i, j in zip(files.tolist(), first.tolist(), last.tolist()):
                if f not in self._files:  # a local file
                    continue
                self._uses.setdefault(f, deque()).append((base + i, base + j, stamp))
                if f not in self._queued:
                    self._queued.add(f)
                    heapq.heappush(self._heap, (base + i, f))
            self._start_threads()
            self._cond.notify_all()

    def close(self) -> None:
        """Stops fetching (a download under way finishes) and withdraws the posted plan."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            if self._board is not None:
                self._board.withdraw(self._board_name)

    def _post_plan(self) -> None:
        """Publishes next-use distances, so readers in other processes evict by the plan."""
        with self._cond:  # held while writing, so that close() cannot slip in between
            if self._closed or self._board is None or self._posted_now == self._now:
                return
            self._posted_now = now = self._now
            distances = {}
            for f in list(self._uses):
                use = self.next_use(f)
                if use != math.inf:
                    distances[entry_key(self._files[f].obj)] = use - now
            self._board.post(self._board_name, distances)

    def next_use(self, f: int) -> float:
        """Plan position of file `f`'s next use; inf when none is known. Call under the lock."""
        uses = self._uses.get(f)
        while uses and uses[0][1] < self._now:
            uses.popleft()
        if not uses:
            return math.inf
        return max(uses[0][0], self._now)

    def _pending_uses(self) -> list[tuple[int, int, int]]:
        """(first use, announced at, file) of uses not started yet. Call under the lock."""
        return [
            (uses[0][0], uses[0][2], f)
            for f, uses in self._uses.items()
            if uses and uses[0][0] > self._now
        ]

    def _observe_progress(self) -> None:
        """Moves `now` to the first use of the latest shard readers opened since it was due."""
        with self._cond:
            pending = self._pending_uses()
        reached = max(
            (
                first
                for first, announced, f in pending
                if self._files[f].cache.last_read_ns(self._files[f].obj) > announced
            ),
            default=None,
        )
        if reached is not None:
            with self._cond:
                if reached > self._now:
                    self._now = reached
                    if self._heap:
                        self._start_threads()
                    self._cond.notify_all()
        self._post_plan()

    def _start_threads(self) -> None:
        """Tops the threads up to `cache.downloads`, one of them watching progress. Under lock."""
        cache = next(iter(self._files.values())).cache
        self._board = cache.plans
        while self._running < cache.downloads:
            observer = not self._observing
            self._observing = self._observing or observer
            self._running += 1
            threading.Thread(
                target=self._run,
                args=(observer,),
                daemon=True,
                name=f"tpufeed-readahead-{self._running}",
            ).start()

    def _take(self) -> tuple[int, float] | None:
        """The queued file needed soonest, with its next use, if fetching is not paused."""
        if self._paused_until > time.monotonic():
            return None
        while self._heap:
            key, f = heapq.heappop(self._heap)
            use = self.next_use(f)
            if use == math.inf:
                self._queued.discard(f)
            elif use > key:
                heapq.heappush(self._heap, (use, f))  # its earlier use passed meanwhile
            else:
                self._queued.discard(f)
                return f, use
        return None

    def _run(self, observer: bool) -> None:
        try:
            self._work(observer)
        finally:
            with self._cond:
                self._running -= 1
                self._observing = self._observing and not observer

    def _work(self, observer: bool) -> None:
        idle_since = time.monotonic()
        while True:
            if observer:
                self._maybe_observe()
            with self._cond:
                if self._closed:
                    return
                taken = self._take()
                if taken is None:
                    # One thread watches readers' progress while it matters (shards wait, or the
                    # cache has been full: readers elsewhere evict by the posted plan); the
                    # others sleep until an announcement or progress wakes them, and all end
                    # once there has been nothing to do for a while.
                    watching = observer and bool(
                        self._heap or (self._pressed and self._pending_uses())
                    )
                    if (
                        not (watching or self._heap)
                        and time.monotonic() - idle_since > _IDLE_EXIT_S
                    ):
                        return
                    self._cond.wait(_PROGRESS_EVERY_S if watching else _IDLE_EXIT_S)
                    continue
            f, use = taken
            remote = self._files[f]
            try:
                outcome = remote.cache.prefetch(remote.obj, self._victims_for(use), use)
            except Exception as exc:  # noqa: BLE001 - the reader refetches and reports it
                log.warning(
                    "read-ahead of %s failed (%s); it is fetched when read", remote.url, exc
                )
                outcome = "failed"
            with self._cond:
                if outcome == "fetched":
                    self.fetched += 1
                elif outcome == "no-room":
                    self._pressed = True
                    # Nothing needed later than this shard may go yet; shards needed later still
                    # could evict even less, so fetching pauses until reading moves on.
                    self._paused_until = time.monotonic() + _RETRY_WAIT_S
                    if f not in self._queued:
                        self._queued.add(f)
                        heapq.heappush(self._heap, (use, f))
            idle_since = time.monotonic()
            self._maybe_sweep()

    def _maybe_observe(self) -> None:
        now = time.monotonic()
        if now - self._last_progress > _PROGRESS_EVERY_S:
            self._last_progress = now
            self._observe_progress()

    def _victims_for(self, use: float) -> VictimChooser:
        """Evicts furthest next use first (least recently used among ties), never before `use`."""

        def choose(entries: list[tuple[str, int, float]], need: int) -> list[str]:
            with self._cond:
                ranked = []
                for key, _, last_used in entries:
                    f = self._file_of_key.get(key)
                    next_use = math.inf if f is None else self.next_use(f)
                    if next_use > use:
                        ranked.append((-next_use, last_used, key))
            ranked.sort()
            return [key for _, _, key in ranked]

        return choose

    def _maybe_sweep(self) -> None:
        now = time.monotonic()
        if self._sweep is not None and now - self._last_sweep > _SWEEP_EVERY_S:
            self._last_sweep = now
            try:
                self._sweep()
            except Exception:
                log.debug("sweeping readers of evicted shards failed", exc_info=True)
