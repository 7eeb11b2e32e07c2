"""Each worker's share of a run: the stage times and counts its answers carried.

The run's clock and `tpufeed.observe.counts` add up every worker's (and the parent's own);
`WorkerShares` keeps them apart per worker too, for `it.stats().per_worker`.
"""

from __future__ import annotations

from collections import Counter

from tpufeed.observe import shipping
from tpufeed.ops.base import StageClock
from tpufeed.run.stats import StageStats, WorkerStats
from tpufeed.run.workers.messages import Answer
from tpufeed.run.workers.slots import SlotMaps

__all__ = ["WorkerShares", "WorkerStats"]


class WorkerShares:
    """Per worker: a clock of its stage times, and what it counted."""

    def __init__(self) -> None:
        self.clocks: dict[int, StageClock] = {}
        self.counts: dict[int, Counter[str]] = {}

    def add(self, worker: int, answer: Answer, clock: StageClock) -> None:
        """One answer's times, into the run's `clock` and the worker's own, and its counts,
        into this process's (`observe.shipping`) and the worker's own."""
        if answer.times:
            clock.merge(answer.times)
            own = self.clocks.get(worker)
            if own is None:  # made once per worker, not per answer
                own = self.clocks[worker] = StageClock()
            own.merge(answer.times)
        counted = shipping.receive(answer.observed)
        if counted:
            self.counts.setdefault(worker, Counter()).update(counted)

    def stats(self, pids: list[int], maps: SlotMaps | None) -> tuple[WorkerStats, ...]:
        """Every worker's share so far (`pids[w]`: worker w's process; `maps`: the segments
        of their batch slots mapped here)."""
        out = []
        for worker, pid in enumerate(pids):
            clock = self.clocks.get(worker, StageClock())
            stages = {
                name: StageStats(seconds, clock.records[name], 1)
                for name, seconds in list(clock.seconds.items())
            }
            shm = maps.mapped_bytes(worker) if maps is not None else 0
            counted = dict(self.counts.get(worker, {}))
            out.append(WorkerStats(worker, pid, stages, counted, shm))
        return tuple(out)
