"""Which epochs each pass over `to_torch()` runs: every pass is the pipeline's next epochs.

A pass is one `iter()` of the IterableDataset: one epoch of a `DataLoader` (torch calls it in
the loop's process with `num_workers=0`, in every worker otherwise). Pass p of a pipeline that
runs n epochs (`repeat(n)`; n = 1 without `repeat`) runs epochs [p * n, (p + 1) * n): a new
permutation and new `random_map` draws each, exactly as `repeat` would have gone on, so
`len()` is the same for every pass. A pass left early (a `break`) does not shift the ones
after it: pass p + 1 still starts at epoch (p + 1) * n, as a DataLoader's sampler draws its
next epoch's order whatever the last one delivered. A pipeline that repeats forever: pass p
runs from epoch p on, without end (keep one iterator to go on where a pass stopped). A
mixture has no epochs of its own: its every pass starts at its start, and the second warns.

The passes are numbered per Dataset object (`tpufeed.adapters._pass_book`): every
`ds.to_torch()` of one `ds` counts in the same book, so `DataLoader(ds.to_torch())` made anew
each epoch goes on too. `set_epoch(e)` makes the next pass pass e. A pass that continues a
state (`set_state`, StatefulDataLoader) runs to the end of that state's pass, and the passes
after it go on from there. A state's pass is its epoch // n: a state taken after the last
batch of pass p is still in pass p (its epoch is the pass's last), one taken at a pass's start
in pass p.

>>> passes = PassEpochs(ds.repeat(2)); passes.pass_of(state_in_epoch_5)  # doctest: +SKIP
2
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tpufeed.adapters._torch_stride import WORKER_KEY, plain_state, strided_iterator
from tpufeed.order.cursor import epoch_start
from tpufeed.run.resume import resume

__all__ = ["PassEpochs", "PassOpener"]


class PassEpochs:
    """The pass arithmetic of `ds` (this host's share, as `to_torch` holds it)."""

    def __init__(self, ds: Any):
        self._ds = ds
        self.mixture = ds._mixture is not None
        self.endless = not self.mixture and ds._epochs is None
        self.group = 1 if self.endless else (ds._epochs or 0)  # epochs a pass starts apart

    def pass_of(self, state: Any) -> int:
        """The pass a state was taken in (0 for a mixture, or a pipeline of no epochs)."""
        if self.mixture or self.group == 0:
            return 0
        return _epoch_of(state) // self.group

    def dataset(self, number: int) -> Any:
        """The pipeline of pass `number`: epochs up to its group's end (a mixture's as it is)."""
        if self.mixture or self.endless or number == 0:
            return self._ds
        return dataclasses.replace(self._ds, _epochs=(number + 1) * self.group)

    def start(self, share: Any, number: int) -> Any:
        """The state at the start of pass `number` for `share` (the host's, or a DataLoader
        worker's share of it); None for the pipeline's own start."""
        if self.mixture or number == 0 or self.group == 0:
            return None
        plan = share._plan()
        return plan.state_of(epoch_start(number * self.group, plan.hosts, plan.host), None)


def _epoch_of(state: Any) -> int:
    """The epoch a state (one host's, every host's, a DataLoader worker's) was taken in: the
    latest of its hosts'; 0 where it has none (resuming it then says what is wrong)."""
    if isinstance(state, (str, bytes)):
        try:
            state = json.loads(state)
        except (ValueError, RecursionError):
            return 0
    if isinstance(state, (list, tuple)):
        return max((_epoch_of(one) for one in state), default=0)
    if not isinstance(state, dict):
        return 0
    if WORKER_KEY in state:
        return _epoch_of(state.get("state"))
    epoch = state.get("epoch")
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 0 else 0


@dataclasses.dataclass(frozen=True)
class PassOpener:
    """Opens pass `number` for one process: the loop's (`worker` None), or DataLoader worker
    `worker` of `workers`, which strides over whole batches (`strided`) or reads every W-th
    record of the host's share."""

    epochs: PassEpochs
    worker: int | None
    workers: int
    strided: bool
    host: int
    hosts: int
    uneven: str | None = None
    agreement: Any = None

    def pass_of(self, state: Any) -> int:
        return self.epochs.pass_of(state)

    def open(self, number: int, state: Any) -> Any:
        """The pass's iterator, from `state` (None: the pass's start). A bad state raises a
        StateError here, before anything runs."""
        ds = self.epochs.dataset(number)
        if self.worker is None or self.workers <= 1:
            start = self.epochs.start(ds, number) if state is None else plain_state(state)
            return ds.iterator(start, self.uneven, self.agreement)
        if self.strided:
            start = self.epochs.start(ds, number) if state is None else state
            return strided_iterator(ds, self.worker, self.workers, start)
        share = self.share(ds)
        return share.iterator(self.epochs.start(share, number) if state is None else state)

    def check(self, state: Any) -> None:
        """Raises a StateError unless this process can continue `state`."""
        ds = self.epochs.dataset(self.pass_of(state))
        if self.worker is None or self.workers <= 1:
            resume(ds._plan(), plain_state(state))
        elif self.strided:
            strided_iterator(ds, self.worker, self.workers, state).close()
        else:
            resume(self.share(ds)._plan(), state)

    def start_state(self, number: int) -> dict[str, Any]:
        """The state at the start of pass `number`, as its iterator gives it before a batch."""
        ds = self.epochs.dataset(number)
        share = ds if self.worker is None or self.workers <= 1 or self.strided else self.share(ds)
        plan = share._plan()
        state = self.epochs.start(share, number) or plan.state_of(plan.start(), None)
        if self.worker is None or self.workers <= 1 or not self.strided:
            return dict(state)
        return {WORKER_KEY: [self.worker, self.workers], "skip": self.worker, "state": state}

    def share(self, ds: Any) -> Any:
        """Where batches cannot be strided: every W-th record of this host's stream."""
        assert self.worker is not None  # only workers have shares
        return ds.shard(self.host + self.worker * self.hosts, self.hosts * self.workers)
