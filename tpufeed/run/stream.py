"""The parent's side of every executor: pieces in order in, items and exact cursors out.

The plan's stream stage (`pack`, `batch`, or the pass-through of an unbatched pipeline) and the
stages after it run here, in one loop for every executor: skipped errors are charged against
`ignore_errors`, and each item leaves with the position right after it and the state of the
stream stage then.
"""

from __future__ import annotations

import logging
import sys
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tpufeed.errors import TpufeedError
from tpufeed.observe import profiler
from tpufeed.ops.base import Counters, End, Item, PieceLike, Reread, StageClock
from tpufeed.ops.item_stages import ItemStages
from tpufeed.ops.registry import stream_stage
from tpufeed.run.plan import Stages, StreamPlan

_log = logging.getLogger("tpufeed")
T = TypeVar("T")


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
                note = (
                    f"tpufeed: ignore_errors({self.max_errors}) skips at most "
                    f"{self.max_errors} bad records; this was bad record {count}"
                )
                if sys.version_info >= (3, 11):
                    error.add_note(note)
                else:  # Python 3.10 has no exception notes
                    error.args = (f"{error.args[0] if error.args else ''}\n{note}", *error.args[1:])
                raise error
            first_line = str(error).split("\n", 1)[0]
            self.causes[_cause(first_line)] += 1
            if count <= _LOGGED_EACH:
                _log.warning(
                    "tpufeed: skipped a bad record (%d of at most %d): %s",
                    count,
                    self.max_errors,
                    first_line,
                )
            elif _is_power_of_ten(count):
                top = "; ".join(f"{n} x {cause}" for cause, n in self.causes.most_common(3))
                _log.warning(
                    "tpufeed: skipped %d bad records so far (of at most %d); most "
                    "common: %s; the latest: %s",
                    count,
                    self.max_errors,
                    top,
                    first_line,
                )


_LOGGED_EACH = 3


def _is_power_of_ten(n: int) -> bool:
    while n % 10 == 0:
        n //= 10
    return n == 1


def _cause(first_line: str) -> str:
    """What kind of failure a skipped record's message names, without the record."""
    return first_line.split(" (on ", 1)[0].split(":", 1)[0][:80]


def _marked(name: str | None, run: Callable[[T], list[Item]], arg: T) -> list[Item]:
    """`run(arg)`, a span `name` in the profilers and on the timeline while they record."""
    spans = profiler.latest()
    if spans is None or name is None:
        return run(arg)
    with spans(name):
        return run(arg)


def stream(
    plan: StreamPlan,
    pieces: Iterator[PieceLike | End],
    counters: Counters,
    clock: StageClock,
    stages: Stages | None = None,
    reread: Reread | None = None,
) -> Generator[tuple[Any, Any, Stages | None], None, None]:
    """(item, position after it, what the stream stages hold then) for `pieces` (a plan's, or
    a mixture's), in order: the plan's stream stage and the stages after it run here. `stages`
    is a saved state to restore the stream stage from, its records read again with `reread`."""
    budget = ErrorBudget(plan.max_errors, counters)
    stage = stream_stage(plan.pack, plan.batch, counters)
    if stages:
        if reread is None:
            raise TpufeedError("a stream stage that holds elements is restored by reading them")
        for saved in stages.values():
            stage.set_state(saved, reread)
    after = ItemStages(plan.tail, plan.names, plan.rng_seed, clock, plan.max_errors > 0)
    name = "pack" if plan.pack is not None else "batch" if plan.batch is not None else None
    made = False  # anything this epoch
    for piece in pieces:
        if isinstance(piece, End):
            counters.dropped_records += piece.dropped
            items = _marked(name, stage.end_epoch, piece)
        else:
            budget.charge(piece.skipped)
            if piece.final:  # one whole batch, the stages after batch already run on it
                if piece.payload is not None:
                    made = True
                    yield piece.payload, piece.cursor_after(piece.size - 1), None
                continue
            items = _marked(name, stage.push, piece)
        for value, position, record, held in items:
            if after.stages:
                skipped: list[TpufeedError] = []
                value = after.run(value, record, piece.epoch, skipped)
                budget.charge(skipped)
                if value is None:
                    continue
            made = True
            yield value, position, None if held is None else {stage.key: held}
        if isinstance(piece, End):
            if not made and piece.whole_epoch and plan.epochs is None:
                raise TpufeedError(
                    f"epoch {piece.epoch} produced nothing for host {plan.host} of "
                    f"{plan.hosts} ({plan.records_per_epoch} records; a filter may drop them "
                    "all), so repeat() would loop forever"
                )
            made = False
