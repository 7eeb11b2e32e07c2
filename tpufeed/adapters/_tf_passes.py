"""Where each pass of a `to_tf()` dataset starts: each iteration is the pipeline's next epochs.

tf.data reshuffles on every iteration of a dataset (`shuffle(reshuffle_each_iteration=True)`);
a Keras epoch is one iteration. So a `to_tf()` dataset is the pipeline's epochs cut into passes
of its `repeat(n)` epochs (one by default): pass p runs epochs [p * n, (p + 1) * n), a new
permutation (and new `random_map` draws) each, exactly as `repeat` would have gone on. Passes
are numbered by TensorFlow's iterations, so the order does not depend on timing, and a pass
left early (a `break`, `take`) does not shift the ones after it.

A pass started from a state (`to_tf(state=...)`, `set_state`) runs to the end of the group of
epochs that state is in, and the passes after it go on from the next group; one from a state
at the very end of its group (taken after its last batch) runs the next group at once.

A pipeline that repeats forever is one endless pass, and a mixture's components keep their
own epochs: their every pass starts where `to_tf(state=...)` says, and the second one warns.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

from tpufeed.errors import UnknownLengthError
from tpufeed.order.cursor import at_segment_start, epoch_start
from tpufeed.run.resume import resume

__all__ = ["INFINITE", "Passes", "Start"]

INFINITE = -1  # tf.data.INFINITE_CARDINALITY: a pass that never ends


@dataclasses.dataclass
class Start:
    """Where one pass starts: `state` (None: the first epoch's start), the pipeline's epoch
    count for the pass (`epochs`, absolute; None: the pipeline's own), whether it came from a
    state (`explicit`), whether the pass is a whole one (`whole`: `cardinality` batches), and
    its iterator where one was opened ahead (set_state checks a state by opening it)."""

    state: Any
    epochs: int | None
    explicit: bool
    whole: bool
    iterator: Any = None

    def open(self, ds: Any) -> Any:
        """The pass's DatasetIterator (the one opened ahead, or a new one)."""
        if self.iterator is None:
            run = ds if self.epochs is None else dataclasses.replace(ds, _epochs=self.epochs)
            self.iterator = run.iterator(self.state)
        return self.iterator


class Passes:
    """The starts of the passes of a `to_tf()` dataset over `ds`, the first at `state`."""

    def __init__(self, ds: Any, state: Any):
        self._ds, self._plan = ds, ds._plan()
        epochs = None if ds._mixture is not None else ds._epochs
        self._group = epochs if epochs else None  # epochs per pass; None: no next epochs
        self._endless = ds._mixture is None and epochs is None
        self._forever = dataclasses.replace(ds, _epochs=None) if self._group else None
        self._base = state
        self._next_epoch = 0  # where the next pass starts, unless a state is set
        self._started = 0
        self._warned = False
        self.upcoming: Start | None = self.explicit(state) if state is not None else None
        self.cardinality = self._cardinality()
        if self.upcoming is not None and not self.upcoming.whole:
            self.cardinality = None  # its first pass is shorter than the others

    def explicit(self, state: Any) -> Start:
        """A start right after `state` (checked here: a StateError names what is wrong)."""
        if self._group is None or self._forever is None:
            it = self._ds.iterator(state)
            return Start(state, None, True, self._endless or self._ds._epochs == 0, it)
        position = resume(self._forever._plan(), state)
        cursor, group = position.position, self._group
        end = (cursor.epoch // group + 1) * group
        whole = (
            position.stages is None
            and at_segment_start(cursor)
            and cursor.base == 0
            and cursor.epoch % group == 0
        )
        start = Start(state, end, True, whole)
        start.open(self._ds)
        return start

    def take(self) -> Start:
        """The start of the next pass (a set state, else the next group of epochs)."""
        start, self.upcoming = self.upcoming, None
        repeated = start is None and self._started > 0
        start = start or self.fresh()
        self._started += 1
        if start.epochs is not None:
            self._next_epoch = start.epochs
        elif repeated:
            self._warn_repeat()
        return start

    def fresh(self) -> Start:
        """Where the next pass starts unless a state is set: the next group's first epoch."""
        if self._group is None:  # every pass where the first started
            whole = self._endless or self._ds._epochs == 0
            return Start(self._base, None, self._base is not None, whole)
        e = self._next_epoch
        state = self._plan.state_of(epoch_start(e, self._plan.hosts, self._plan.host), None)
        return Start(state, e + self._group, False, True)

    def after(self, start: Start) -> Start | None:
        """What follows a pass from `start` that had no batch: the next group, if there are
        groups and `start` came from a state (taken after the last batch of its group)."""
        if not start.explicit or self._group is None:
            return None
        return self.take_fresh()

    def take_fresh(self) -> Start:
        """The next group's start, taken (the pass goes on there)."""
        start = self.fresh()
        self._next_epoch = start.epochs or self._next_epoch
        return start

    def start_state(self, start: Start) -> dict[str, Any]:
        """The state at `start`, as its iterator would give it."""
        if start.iterator is not None:
            return start.iterator.get_state()
        if start.state is None:
            return self._plan.state_of(self._plan.start(), None)
        if isinstance(start.state, dict):
            return dict(start.state)
        it = self._ds.iterator(start.state)  # every host's states: where this host starts
        try:
            return it.get_state()
        finally:
            it.close()

    def _cardinality(self) -> int | None:
        """Batches in a whole pass, where the record counts alone decide them (tf.data's
        `cardinality()`): None where unknown."""
        if self._endless:
            return INFINITE
        try:
            return len(self._ds)  # every epoch of the pass: the pipeline's length
        except UnknownLengthError:  # counts that depend on the data (a mixture's too)
            return None

    def _warn_repeat(self) -> None:
        if self._warned:
            return
        self._warned = True
        what = "repeats forever (one endless pass)" if self._endless else "is a mixture"
        warnings.warn(
            f"to_tf: a new pass over a dataset whose pipeline {what} starts where the first "
            "did, so it repeats its order. Keep one iterator (Keras keeps one with "
            "steps_per_epoch), or start the pass elsewhere with tf_ds.set_state(state)",
            RuntimeWarning,
            stacklevel=2,
        )
