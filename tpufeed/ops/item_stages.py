"""The record stages after `batch` (or `pack`), run on each whole item, in one place.

A batch is finished either in a worker (where a chunk is exactly one batch) or in the parent,
after the stream stage cuts it from pieces; both run it through `ItemStages.run`, so the
stages see the same item, draw the same rng (from the item's first record) and fail with the
same error wherever it is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tpufeed.errors import TpufeedError
from tpufeed.ops.base import Context, Elements, RecordNames, RecordStage, StageClock, stage_names
from tpufeed.order.rng import RecordRngs


class ItemStages:
    """Runs `stages` on whole items; `names` names the records in errors."""

    def __init__(
        self,
        stages: Sequence[RecordStage],
        names: RecordNames,
        rng_seed: int,
        clock: StageClock,
        tolerant: bool = False,
        beacon: Any = None,
    ):
        self.stages = tuple(stages)
        self.labels = stage_names(self.stages, " on batches")
        self.names, self.rng_seed, self.clock = names, rng_seed, clock
        self.tolerant, self.beacon = tolerant, beacon
        self._rngs: dict[tuple[int, int], RecordRngs] = {}

    def run(self, item: Any, record: int, epoch: int, skipped: list[TpufeedError]) -> Any | None:
        """The item after the stages (None if they drop it); `record` is its first record. The
        errors of a tolerant pipeline go to `skipped`."""
        if not self.stages:
            return item
        context = Context(
            epoch,
            [record],
            self.names,
            self.rng_seed,
            self.clock,
            [] if self.tolerant else None,
            self._rngs,
            self.beacon,
        )
        elements = Elements([item], [0])
        for stage, label in zip(self.stages, self.labels):
            elements = stage.run(elements, context, label)
        skipped += context.skipped or []
        return elements.values[0] if elements.values else None
