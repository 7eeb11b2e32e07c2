"""The in-process executor: walk the plan, run each chunk here, stream the pieces.

`Producer.items()` yields (item, cursor after it, stream stages' state), like the worker engine
does with the same walk, the same `ChunkRunner` and the same `stream`.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from tpufeed.chunk import ChunkRunner, WarmPieces
from tpufeed.ops.base import Chunk, Piece
from tpufeed.order.cursor import Cursor
from tpufeed.plan import Plan
from tpufeed.ops.base import StageClock
from tpufeed.ops.base import Counters
from tpufeed.stream import stream
from tpufeed.walk import walk


@dataclass
class Producer:
    """Walks a plan from a cursor (and stream stages' state) in this process; `items()` yields
    (item, cursor after it, stream stages' state then)."""

    plan: Plan
    cursor: Cursor
    counters: Counters = field(default_factory=Counters)
    clock: StageClock = field(default_factory=StageClock)
    stages: dict[str, Any] | None = None
    beacon: Any = None  # a watch.Beacon, when a timeout watches the pipeline
    warm: tuple[Piece, ...] = ()  # the first chunks' pieces, made by the "auto" warm-up

    def items(self) -> Generator[tuple[Any, Cursor, dict[str, Any] | None], None, None]:
        runner = ChunkRunner(self.plan, self.clock, self.beacon)
        warm = WarmPieces(self.warm)
        pieces = ((warm.take(step) or runner.run_chunk(step)) if isinstance(step, Chunk) else step
                  for step in walk(self.plan, self.cursor))
        return stream(self.plan, pieces, self.counters, self.clock, self.cursor, self.stages)
