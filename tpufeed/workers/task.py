"""One task: read records by index, run the element stage, stack the survivors.

Shared by worker processes (which stack straight into a shared-memory slot) and by the parent
(which runs the very first task itself while the workers start), so both give the same batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tpufeed.batching import stack
from tpufeed.pipeline import Plan, read
from tpufeed.stages import ElementStage
from tpufeed.stats import StageClock, now

Stacker = Callable[[list[Any], Callable[[int], str]], Any]  # (elements, describe) -> batch
Placer = Callable[[Any], Any]  # an already stacked batch -> where it lives


class TaskRunner:
    """Runs tasks of one plan. `whole_batches`: a task is exactly one batch (no filter)."""

    def __init__(self, plan: Plan, batched: bool, whole_batches: bool, clock: StageClock):
        self.plan, self.batched, self.whole_batches = plan, batched, whole_batches
        self.clock = clock
        tolerant = plan.max_errors > 0
        self.stage = ElementStage(plan.element_ops, plan.rng_seed, plan.source, clock,
                                  tolerant=tolerant)
        self.batch_stage = ElementStage(plan.batch_ops, plan.rng_seed, plan.source, clock,
                                        on_batches=True, tolerant=tolerant)

    def run(self, indices: np.ndarray, epoch: int, stacker: Stacker = stack,
            placer: Placer = lambda batch: batch) -> tuple[str, Any, list[int]]:
        """("items", elements, offsets) unbatched, else ("batch", stacked or None, offsets).

        Errors of records skipped by a tolerant pipeline wait in `take_skipped()`.
        """
        plan = self.plan
        records = indices.tolist()
        skipped = self.stage.skipped if self.stage.tolerant else None
        chunk, offsets = read(plan.source, indices, self.clock, skipped)
        elements, offsets = self.stage.run(chunk, records, epoch, offsets)
        if not self.batched:
            return "items", elements, offsets
        if not elements:
            return "batch", None, offsets
        describe = lambda i: plan.source.describe(records[offsets[i]])  # noqa: E731
        started = now()
        if self.whole_batches and self.batch_stage.ops:
            batch = stack(elements, describe)
            self.clock.add("batch", now() - started, len(elements))
            kept, _ = self.batch_stage.run([batch], records[:1], epoch)
            return "batch", placer(kept[0]) if kept else None, offsets
        stacked = stacker(elements, describe)
        self.clock.add("batch", now() - started, len(elements))
        return "batch", stacked, offsets

    def take_skipped(self) -> list:
        """Errors of the records skipped since the last call, in order."""
        skipped = self.stage.skipped + self.batch_stage.skipped
        self.stage.skipped.clear()
        self.batch_stage.skipped.clear()
        return skipped
