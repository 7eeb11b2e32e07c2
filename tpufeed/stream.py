"""The parent's side of every executor: pieces in order in, items and exact cursors out.

Stream stages (`pack`, `batch`) and the stages after them run here, skipped errors are charged
against `ignore_errors`, and each item leaves with the cursor right after it and the state of
the stream stages then.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Generator, Iterator, Sequence
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tpufeed.chunk import ChunkRunner
from tpufeed.ops.base import Counters, EpochEnd, StageClock
from tpufeed.order.cursor import Cursor, at_segment_start
from tpufeed.errors import TpufeedError
from tpufeed.plan import Plan
from tpufeed.ops.batch import Batcher
from tpufeed.ops.pack import Outputs, Packer

if TYPE_CHECKING:
    from tpufeed.mix import MixPlan

_log = logging.getLogger("tpufeed")


@dataclass
class ErrorBudget:
    """Counts skipped bad records against `ignore_errors(max_errors)`; past it, raises.

    The first `_LOGGED_EACH` skips are logged one line each (file, record, cause); after that one
    summary line at every power of ten (10, 100, ...) counts them by cause, so a corpus with many
    bad records does not flood the log. `it.stats().errors` has the exact count at any time.
    """

    max_errors: int
    counters: Counters
    causes: Counter = field(default_factory=Counter)

    def charge(self, errors: Sequence[TpufeedError]) -> None:
        for error in errors:
            self.counters.errors += 1
            count = self.counters.errors
            if count > self.max_errors:
                note = (f"tpufeed: ignore_errors({self.max_errors}) skips at most "
                        f"{self.max_errors} bad records; this was bad record {count}")
                if sys.version_info >= (3, 11):
                    error.add_note(note)
                else:  # Python 3.10 has no exception notes
                    error.args = (f"{error.args[0] if error.args else ''}\n{note}", *error.args[1:])
                raise error
            first_line = str(error).split("\n", 1)[0]
            self.causes[_cause(first_line)] += 1
            if count <= _LOGGED_EACH:
                _log.warning("tpufeed: skipped a bad record (%d of at most %d): %s", count,
                             self.max_errors, first_line)
            elif _is_power_of_ten(count):
                top = "; ".join(f"{n} x {cause}" for cause, n in self.causes.most_common(3))
                _log.warning("tpufeed: skipped %d bad records so far (of at most %d); most "
                             "common: %s; the latest: %s", count, self.max_errors, top, first_line)


_LOGGED_EACH = 3


def _is_power_of_ten(n: int) -> bool:
    while n % 10 == 0:
        n //= 10
    return n == 1


def _cause(first_line: str) -> str:
    """What kind of failure a skipped record's message names, without the record."""
    return first_line.split(" (on ", 1)[0].split(":", 1)[0][:80]


def stream(plan: Plan | MixPlan, pieces: Iterator[Any], counters: Counters, clock: StageClock,
           start: Any, stages: dict[str, Any] | None = None, reread: Outputs | None = None
           ) -> Generator[tuple[Any, Any, dict[str, Any] | None], None, None]:
    """(item, cursor after it, state of the stream stages then) for the pieces of
    `walk(plan, start)` (or a mixture's), processed in order; `stages` is a state to restore
    them from, re-reading the records it names with `reread` (default: the plan's)."""
    budget = ErrorBudget(plan.max_errors, counters)
    finisher = ChunkRunner(plan, clock)  # the stages after batch, when the parent cuts batches
    runner: Packer | Batcher | None = None
    if plan.pack is not None:
        runner = Packer(plan.pack, plan.batch, counters, plan.record_key + 2)
        if stages is not None and "pack" in stages:
            def outputs(records: list[tuple[int, ...]]) -> dict[tuple[int, ...], list[Any]]:
                found = finisher.outputs(start.epoch, [r[0] for r in records])
                return {(position,): outs for position, outs in found.items()}
            runner.restore(stages["pack"], reread or outputs)
    elif plan.batch is not None:
        runner = Batcher(plan.batch, counters)
    made = False  # anything this epoch
    for piece in pieces:
        if hasattr(piece, "final_cursor"):  # the end of an epoch (or of a mixture)
            counters.dropped_records += getattr(piece, "dropped", 0)
            if runner is not None:
                for item in _finish(finisher, budget, runner.end_epoch(piece), piece.epoch):
                    made = True
                    yield item
            if not made and isinstance(piece, EpochEnd) and plan.epochs is None \
                    and at_segment_start(piece.cursor) and piece.cursor.base == 0:
                raise TpufeedError(
                    f"epoch {piece.cursor.epoch} produced nothing for host {piece.cursor.host} of "
                    f"{piece.cursor.hosts} ({len(plan.source)} records; a filter may drop them "
                    "all), so repeat() would loop forever")
            made = False
            continue
        budget.charge(piece.skipped)
        if piece.final:
            if piece.payload is not None:
                made = True
                yield piece.payload, piece.cursor_after(piece.size - 1), None
        elif runner is None:
            for i, element in enumerate(piece.payload):
                made = True
                yield element, piece.cursor_after(i), None
        else:
            for item in _finish(finisher, budget, runner.push(piece), piece.epoch):
                made = True
                yield item


def _finish(finisher: ChunkRunner, budget: ErrorBudget, cuts: list, epoch: int
            ) -> Iterator[tuple[Any, Cursor, dict[str, Any] | None]]:
    for item, cursor, first_record, state in cuts:
        skipped: list[TpufeedError] = []
        item = finisher.finish(item, first_record, epoch, skipped)
        budget.charge(skipped)
        if item is not None:
            yield item, cursor, None if state is None else {"pack": state}
