"""Hosts end together: every host's epoch ends at the same step, whatever each host made.

In SPMD training every process takes part in every step; a host that runs out of batches one
step early leaves the others waiting in a collective forever. With a filter, `flat_map`,
`ignore_errors` or an uneven last shard, hosts make different numbers of batches. So the hosts
agree, through a small collective (`HostAgreement.count`), on how many more steps each epoch
has: each holds the next few batches ready and says how many of them belong to the epoch being
run; all hosts act on the same answer (one agreement per `LOOKAHEAD` steps mid-epoch):

- `"shortest"` (the default): the epoch ends at the step where the first host has no full batch
  left; the other hosts drop the rest of their epoch (counted in `stats().cut_batches` and
  `dropped_records`). Batches keep their structure.
- `"pad"`: the epoch lasts as long as the longest host; a host that has run out hands over fully
  masked batches (zeros) until then. Every batch gains a boolean `mask` leaf (False on padding)
  and a short last batch is padded to full size, so every step has one shape
  (`stats().padded_batches`, `padded_rows`).

Where the counts cannot depend on the data and every host's share gives the same batches, no
step needs agreeing and nothing is exchanged.

>>> it = ds.shard().filter(keep).batch(64).iterator(uneven="pad")   # doctest: +SKIP
>>> for batch in it: loss = step(batch, batch["mask"])              # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from tpufeed.errors import InvalidArgumentError, TpufeedError
from tpufeed.observe import counts, timeline
from tpufeed.ops.base import now
from tpufeed.order.cursor import Cursor, epoch_start
from tpufeed.run.hosts.agreement import HostAgreement, default_agreement
from tpufeed.run.plan import Plan
from tpufeed.run.stats import PipelineStats

UNEVEN = ("shortest", "pad")
MASK = "mask"
LOOKAHEAD = 4  # steps agreed at once in the middle of an epoch (items held ahead per host)


def check_uneven(uneven: str | None) -> str | None:
    if uneven is not None and uneven not in UNEVEN:
        raise InvalidArgumentError(f"uneven must be None, 'shortest' or 'pad', got {uneven!r}")
    return uneven


def counts_are_even(plan: Plan, cursor: Cursor) -> bool:
    """Whether every host makes the same batches (count and last size) from `cursor` on,
    decided from the record count alone; never true where counts depend on the data."""
    if plan.hosts == 1:
        return True
    if plan.counts_depend_on_data or cursor.carries:
        return False
    n = plan.records_per_epoch
    size = plan.batch.batch_size if plan.batch is not None else 1
    drop = plan.batch.drop_remainder if plan.batch is not None else False
    fresh = [epoch_start(cursor.epoch + 1, plan.hosts, h) for h in range(plan.hosts)]
    resumed = [cursor._replace(host=h) for h in range(plan.hosts)]
    more_epochs = plan.epochs is None or cursor.epoch + 1 < plan.epochs
    for cursors in [resumed, fresh] if more_epochs else [resumed]:
        left = {c.stream_size(n) - c.consumed for c in cursors}
        shapes = {(units // size, 0 if drop else units % size) for units in left}
        if len(shapes) > 1:
            return False
    return True


class EvenHosts(Iterator[Any]):
    """Wraps a host's iterator so that all hosts end each epoch at the same step.

    `inner` yields items and has `get_state()` (a DatasetIterator); `batch_size` is the
    pipeline's (None: no batch stage, every item counts as full); `template` makes an item to
    pad from when this host has seen none.

    Hosts agree once per `LOOKAHEAD` steps in the middle of an epoch: each holds up to that many
    items of the epoch ready and says how many it holds; all then run as many steps as the
    answer allows, without talking, and agree again.
    """

    def __init__(
        self,
        inner: Any,
        uneven: str,
        agreement: HostAgreement | None,
        hosts: int,
        batch_size: int | None,
        template: Callable[[], Any],
    ):
        self._inner, self._uneven, self._agreement = inner, uneven, agreement
        self._hosts, self._batch_size, self._template_source = hosts, batch_size, template
        self._state = inner.get_state()
        self._epoch = inner.epoch  # the epoch all hosts are running: the same on all
        self._delivered_epoch = self._epoch  # the epoch of the last item handed out
        # Items taken from `inner`, not handed out: (item, state after it, its epoch).
        self._ahead: deque[tuple[Any, dict[str, Any], int]] = deque()
        self._ended = False
        self._steps: deque[bool] = deque()  # agreed steps: True hands an item, False pads
        self._after_steps = ""  # what the agreed steps end with: "", "cut" or "next epoch"
        self._template: Any = None
        self.cut_batches = self.cut_records = self.padded_batches = self.padded_rows = 0
        self.agreements, self.agreement_seconds = 0, 0.0
        if uneven == "pad" and batch_size is None:
            raise InvalidArgumentError(
                "uneven='pad' needs a pipeline with batch(): padding fills whole batches"
            )

    def __iter__(self) -> EvenHosts:
        return self

    def __next__(self) -> Any:
        while not self._steps:
            if self._after_steps:
                self._drop_epoch()
            self._agree()
        return self._deliver() if self._steps.popleft() else self._pad()

    def _agree(self) -> None:
        """Agrees on the next steps with the other hosts; raises StopIteration at the end."""
        ready = self._ready()
        flags = tuple(i < ready for i in range(LOOKAHEAD)) + (bool(self._fill(1)),)
        everyone = self._hosts
        if self._agreement is None:  # the counts are even: nothing to agree on
            everyone, totals = 1, tuple(map(int, flags))
        else:
            started = now()
            totals = self._agreement.count(flags)
            seconds = now() - started
            self.agreement_seconds += seconds
            self.agreements += 1
            counts.count("agreements")
            timeline.complete("host agreement", seconds, "agreement", {"totals": list(totals)})
        having, alive = totals[:-1], totals[-1]
        common = sum(1 for c in having if c == everyone)  # steps every host can make
        longest = sum(1 for c in having if c)  # steps some host can make
        if not longest and not alive:
            self._ended = True
            raise StopIteration
        steps = common if self._uneven == "shortest" else longest
        self._steps.extend(i < ready for i in range(steps))
        # Fewer than LOOKAHEAD steps: some host reached the end of the epoch.
        self._after_steps = "" if steps == LOOKAHEAD else "next epoch"

    def _ready(self) -> int:
        """Full items of the running epoch held ready, up to LOOKAHEAD."""
        count = 0
        while count < LOOKAHEAD and count < self._fill(count + 1):
            item, _, epoch = self._ahead[count]
            if epoch != self._epoch or not self._full(item):
                break
            count += 1
        return count

    def _fill(self, n: int) -> int:
        """Takes items from `inner` until `n` are ahead (or it ends); how many are ahead."""
        while len(self._ahead) < n and not self._ended:
            try:
                item = next(self._inner)
            except StopIteration:
                self._ended = True
                break
            self._ahead.append((item, self._inner.get_state(), self._inner.epoch))
            if self._template is None:
                self._template = item
        return len(self._ahead)

    def get_state(self) -> dict[str, Any]:
        """The state after the last item handed out (padding and cut batches change nothing)."""
        return dict(self._state)

    def stats(self) -> PipelineStats:
        stats = self._inner.stats()
        return dataclasses.replace(
            stats,
            dropped_records=stats.dropped_records + self.cut_records,
            cut_batches=self.cut_batches,
            padded_batches=self.padded_batches,
            padded_rows=stats.padded_rows + self.padded_rows,
            agreements=self.agreements,
            agreement_seconds=self.agreement_seconds,
            counts={
                **stats.counts,
                "agreements": self.agreements,
            },  # this host's, not the process's
        )

    @property
    def epoch(self) -> int:
        return self._delivered_epoch

    @property
    def records_delivered(self) -> int:
        return self._inner.records_delivered

    @property
    def dropped_records(self) -> int:
        return self._inner.dropped_records + self.cut_records

    def start(self) -> None:
        """Begins the inner run's first items (`DatasetIterator.start`)."""
        self._inner.start()

    def close(self) -> None:
        self._inner.close()

    def __enter__(self) -> EvenHosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _deliver(self) -> Any:
        item, self._state, self._delivered_epoch = self._ahead.popleft()
        if self._uneven != "pad":
            return item
        size, rows = self._padded_size(), _rows(item)
        short = size - rows
        if short:
            self.padded_rows += short
            item = _map_leaves(lambda leaf: _padded(leaf, size), item)
        return _masked(item, np.arange(size) < rows)

    def _pad(self) -> Any:
        size = self._padded_size()
        if self._template is None:
            self._template = self._template_source()
        self.padded_batches += 1
        self.padded_rows += size
        zeros = _map_leaves(
            lambda leaf: np.zeros((size, *np.shape(leaf)[1:]), np.asarray(leaf).dtype),
            self._template,
        )
        return _masked(zeros, np.zeros(size, bool))

    def _padded_size(self) -> int:
        """The rows of a padded batch: the batch size (uneven='pad' needs one, checked at start)."""
        if self._batch_size is None:
            raise InvalidArgumentError(
                "uneven='pad' needs a pipeline with batch(): padding fills whole batches"
            )
        return self._batch_size

    def _drop_epoch(self) -> None:
        """Drops what is left of the epoch being run (counted), then runs the next."""
        while self._fill(1) and self._ahead[0][2] == self._epoch:
            item, _, _ = self._ahead.popleft()
            self.cut_batches += 1
            self.cut_records += _rows(item)
        self._epoch += 1
        self._after_steps = ""

    def _full(self, item: Any) -> bool:
        """Whether `item` can be a step of a multi-host run: a short batch cannot (its shape
        differs) unless it is padded."""
        return (
            self._batch_size is None
            or self._uneven == "pad"
            or self._agreement is None
            or _rows(item) == self._batch_size
        )


def _rows(item: Any) -> int:
    while isinstance(item, (dict, list, tuple)) and len(item):
        item = next(iter(item.values())) if isinstance(item, dict) else item[0]
    return len(item) if np.ndim(item) else 1


def _map_leaves(fn: Callable[[Any], Any], tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _map_leaves(fn, v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_map_leaves(fn, v) for v in tree)
    return fn(tree)


def _padded(leaf: Any, size: int) -> np.ndarray:
    leaf = np.asarray(leaf)
    filler = np.zeros((size - len(leaf), *leaf.shape[1:]), leaf.dtype)
    return np.concatenate([leaf, filler])


def _masked(item: Any, mask: np.ndarray) -> Any:
    if not isinstance(item, dict):
        raise InvalidArgumentError(
            f"uneven='pad' adds a {MASK!r} leaf, so batches must be dicts; "
            f"got a {type(item).__name__}"
        )
    if MASK in item:
        raise InvalidArgumentError(
            f"uneven='pad' adds a {MASK!r} leaf, but the batch already has "
            f"one: rename it in a map()"
        )
    return {**item, MASK: mask}


def first_item(one_host: Any) -> Any:
    """The first item of a one-host pass of a dataset: what a host that made nothing pads from."""
    with one_host.iterator() as it:
        for item in it:
            return item
    raise TpufeedError(
        f"the pipeline makes no item at all, so there is nothing to pad from: {one_host!r}"
    )


def end_together(
    make: Callable[[], Any],
    plan: Any,
    cursor: Any,
    uneven: str | None,
    agreement: HostAgreement | None,
    template: Callable[[], Any],
) -> Any:
    """The iterator `make()` gives, ending each epoch with the other hosts (`uneven`), agreeing
    only where the counts can differ (default: `default_agreement`, torch's or jax's)."""
    uneven = check_uneven(uneven)
    if uneven is None:
        return make()
    if uneven == "pad" and plan.batch is None:
        raise InvalidArgumentError(
            "uneven='pad' needs a pipeline with batch(): padding fills whole batches"
        )
    even = counts_are_even(plan, cursor)
    if even and uneven == "shortest":
        return make()
    if not even and agreement is None:
        agreement = default_agreement(plan.fingerprint, hosts=plan.hosts)
    batch_size = plan.batch.batch_size if plan.batch is not None else None
    return EvenHosts(make(), uneven, None if even else agreement, plan.hosts, batch_size, template)
