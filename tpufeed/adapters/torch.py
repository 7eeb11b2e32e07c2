"""`Dataset.to_torch`: an `IterableDataset` yielding batches of torch tensors.

Hand it to `DataLoader(..., batch_size=None)`: tpufeed batches already, and a DataLoader
that batches again (its default `batch_size=1`) is refused with an error naming
`batch_size=None`. Tuples arrive as tuples (torch's default collation makes other tuples
lists).

Under `DataLoader(num_workers=W)` the loop receives the same batches, in the same order, as
with `num_workers=0` wherever every batch is cut from a fixed number of records (`batch` with no
`filter`, `flat_map`, `pack` or `ignore_errors` before it): worker w makes batches w, w+W,
... of this host's stream, and the DataLoader takes them from its workers in turn. Inside the
workers the pipeline runs in process (tpufeed's own `.workers` and `.prefetch` are not used:
the DataLoader's workers and `prefetch_factor` take their place).

Otherwise (counts that depend on the data, unbatched pipelines, mixtures) worker w reads the
host's records at stream positions w, w+W, ... (the share `host + w * hosts` of
`hosts * W`) and filters and batches them on its own: each epoch delivers the same records,
each once, but grouped into batches and ordered differently, with up to W short batches (each
worker's last) instead of one, so the number of batches can change with W.

Each pass (each `iter()`: every epoch of a DataLoader) is the pipeline's next epochs, as a
sampler draws a new order each epoch: pass p of a pipeline that runs n epochs (`repeat(n)`, 1
without it) runs epochs [p * n, (p + 1) * n), with any `num_workers`; `set_epoch(e)` makes the
next pass pass e. The passes of one `Dataset` object are counted together, in every worker
(`tpufeed.adapters._torch_passes`, `tpufeed.adapters._pass_book`). `len()` is `len(ds)`.

Checkpoints: torchdata's `StatefulDataLoader` saves and restores every worker's position
(`get_state`/`state_dict` of these objects), exactly, with any `num_workers`. Workers started
by fork are safe after the parent has read: open files are reopened in each worker, and
ArrayRecord files are read through a helper process (see `sources.array_record._reader_process`). Numeric
leaves become tensors (sharing memory with the batch); bytes and str leaves become lists, as
torch's default collation makes them. Tuples stay tuples through a DataLoader's default
collation: inside one they travel as `KeptTuple`, which that collation turns back into a
plain tuple (it rebuilds namedtuples by their type, and makes lists of other tuples).

>>> loader = StatefulDataLoader(ds.batch(32).to_torch(), batch_size=None, num_workers=2)  # doctest: +SKIP
>>> saved = loader.state_dict()        # after k batches: resumes at batch k + 1  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import json
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from tpufeed.adapters._leaves import map_leaves
from tpufeed.adapters._pass_book import book_of
from tpufeed.adapters._torch_passes import PassEpochs, PassOpener
from tpufeed.adapters._torch_stride import is_worker_state, plain_state
from tpufeed.adapters._wait_clock import WaitClock
from tpufeed.errors import InvalidArgumentError, StateError, missing_dependency
from tpufeed.run.hosts.uneven import check_uneven

try:
    import torch
    from torch.utils.data import IterableDataset, default_collate, default_convert, get_worker_info
except ImportError:  # pragma: no cover - the adapter is only imported through to_torch
    raise missing_dependency("torch", "torch") from None

__all__ = ["KeptTuple", "TorchIterable", "TorchIterator", "to_torch"]

BATCHED_TWICE = (
    "DataLoader(ds.to_torch()) batches the batches tpufeed already makes: each would arrive "
    "stacked again, with a leading dimension of the loader's batch_size (1 by default). Pass "
    "batch_size=None: DataLoader(ds.to_torch(), batch_size=None); or, to let the DataLoader "
    "batch, leave .batch() out of the pipeline"
)

MIXTURE_AGAIN = (
    "to_torch: a new pass over a mixture starts where the first did (a mixture has no next "
    "epoch), so it repeats its order. Keep one iterator across your epochs, or start the pass "
    "elsewhere with set_state(state)"
)

UNEVEN_IN_WORKERS = (
    "to_torch(uneven={uneven!r}) agrees with the other processes from the process that "
    "iterates, so it runs in the DataLoader's process: pass num_workers=0, and give the "
    "pipeline tpufeed's own workers instead (ds.workers(n))"
)


def to_torch(
    ds: Any, pin_memory: bool = False, uneven: str | None = None, agreement: Any = None
) -> TorchIterable:
    """An IterableDataset over `ds`; `pin_memory` pins tensors for fast copies to an accelerator;
    `uneven` ends every process's epochs at the same step, as `Dataset.iterator(uneven=...)`
    (agreeing through torch.distributed's store by default in a torch.distributed run)."""
    return TorchIterable(ds, pin_memory=pin_memory, uneven=uneven, agreement=agreement)


class TorchIterable(IterableDataset):
    """Each `iter()` is a pass: the pipeline's next epochs, or the rest of the pass of the state
    given to `set_state` (`tpufeed.adapters._torch_passes`: pass p of a pipeline that runs n
    epochs runs epochs [p * n, (p + 1) * n)). `set_epoch(e)` makes the next pass pass e.

    `get_state()` (= `state_dict()`) describes the pass running in this process: with
    `num_workers=0` exactly what the loop received. Inside DataLoader workers each worker has
    its own; `StatefulDataLoader.state_dict()` collects them through these same methods.

    >>> data = ds.to_torch(); data.set_state(saved)   # the next pass continues there  # doctest: +SKIP
    >>> for epoch in range(3):
    ...     data.set_epoch(epoch)                      # as with a DistributedSampler  # doctest: +SKIP
    ...     for batch in DataLoader(data, batch_size=None, num_workers=2): ...  # doctest: +SKIP
    """

    def __init__(
        self, ds: Any, pin_memory: bool = False, uneven: str | None = None, agreement: Any = None
    ):
        # Resolved here, in the main process: a `.shard()` default asks jax, and importing jax
        # in a DataLoader worker forked from a process that imported torch crashes it.
        self._host, self._hosts = ds._sharding.resolve()
        self._ds = ds.shard(self._host, self._hosts)
        plan = self._ds._plan()
        self._strided = plan.fused  # each chunk one batch: workers can stride
        self._batches = plan.batch is not None
        self._pin_memory = bool(pin_memory)
        self._uneven, self._agreement = check_uneven(uneven), agreement
        self._epochs = PassEpochs(self._ds)
        self._book = book_of(ds)  # every to_torch() of `ds` numbers its passes in one book
        self._own: Any = None  # a DataLoader worker's own state, for its next pass
        self._pending_here = False  # a state set in the loop's process, maybe not taken yet
        self._begun = 0  # passes begun in this process (part of a worker's key to its pass)
        self._iterator: TorchIterator | None = None

    def __iter__(self) -> TorchIterator:
        collation = _collation(sys._getframe(1))  # the DataLoader's, if one calls
        if collation is not None and collation[0] and self._batches:
            raise InvalidArgumentError(BATCHED_TWICE)
        keep_tuples = collation is not None and collation[1] in (default_convert, default_collate)
        info = get_worker_info()
        if self._uneven is not None and info is not None:
            raise InvalidArgumentError(UNEVEN_IN_WORKERS.format(uneven=self._uneven))
        opener = self._opener()
        member = (
            None if info is None else (info.seed - info.id, info.num_workers, self._begun, info.id)
        )
        own, self._own, self._pending_here = self._own, None, False
        number, state = self._book.claim(member, own, opener.pass_of)
        self._begun += 1
        if self._epochs.mixture and number > 0 and state is None and not (info and info.id):
            warnings.warn(MIXTURE_AGAIN, RuntimeWarning, stacklevel=2)
        pin = _pinning(self._pin_memory, info is not None)
        self._iterator = TorchIterator(opener, number, state, pin, keep_tuples)
        return self._iterator

    def __len__(self) -> int:
        """Items of one pass (what `len(DataLoader(data, batch_size=None))` reports): `len(ds)`,
        every epoch of the pipeline, whatever `num_workers`; an `UnknownLengthError` (a
        TypeError) saying why where the data decides the count or the pipeline never ends.
        A pass resumed by `set_state` makes fewer."""
        return len(self._ds)

    def __bool__(self) -> bool:
        return True  # a description, like the Dataset: truthy even where len() is unknown

    def set_epoch(self, epoch: int) -> None:
        """The next pass is pass `epoch` (its first epoch `epoch * n` for `repeat(n)`), in this
        process and in every DataLoader worker, persistent ones included; the passes after it
        go on from there. A state set by `set_state` still goes first."""
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
            raise InvalidArgumentError(f"set_epoch takes an int >= 0, got {epoch!r}")
        self._book.select(epoch)

    def get_state(self) -> dict[str, Any]:
        """The position of the running (or last) pass; before any pass, where the next starts."""
        waiting = self._own  # in a worker; in the loop's process, a state set here
        if waiting is None and get_worker_info() is None and self._pending_here:
            waiting = self._book.upcoming()[1]  # unless a pass took it since
        if waiting is not None:
            return copy.deepcopy(waiting)
        if self._iterator is not None:
            return self._iterator.get_state()
        return self._opener().start_state(self._book.upcoming()[0])

    def set_state(self, state: Any) -> None:
        """The next `iter()` continues right after `state` (to the end of its pass): one
        `get_state()`, or the list of every host's (then on any host count, as
        `Dataset.iterator(state)`). Checked now. Set in the loop's process, it is where the
        next pass starts in whichever process runs it (DataLoader workers included)."""
        self._opener().check(state)
        if get_worker_info() is not None:
            self._own = copy.deepcopy(state)
        else:
            self._book.set_pending(_json_state(state))
            self._pending_here = True

    def state_dict(self) -> dict[str, Any]:
        """`get_state()`, under torch's name (torchdata's StatefulDataLoader calls it)."""
        return self.get_state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """`set_state(state)`, under torch's name."""
        if not isinstance(state, dict):
            raise StateError(
                f"load_state_dict needs a dict from state_dict(), got {type(state).__name__}"
            )
        self.set_state(state)

    def stats(self) -> Any:
        """The `PipelineStats` of the current (or last) pass in this process."""
        if self._iterator is None:
            raise InvalidArgumentError("stats() describes a pass: iterate first")
        return self._iterator.stats()

    @property
    def wait_fraction(self) -> float:
        """Of the current pass in this process: time blocked on input / wall time."""
        return self._iterator.wait_fraction if self._iterator is not None else 0.0

    def _opener(self) -> PassOpener:
        """Opens this process's passes: the loop's, or this DataLoader worker's."""
        info = get_worker_info()
        worker, workers = (None, 1) if info is None else (info.id, info.num_workers)
        return PassOpener(
            self._epochs,
            worker,
            workers,
            self._strided,
            self._host,
            self._hosts,
            self._uneven,
            self._agreement,
        )


class TorchIterator(Iterator[Any]):
    """One pass: batches as tensors. `get_state()` says what it has returned so far;
    `set_state(state)` continues right after `state`, to the end of that state's pass
    (workers and prefetch restart, nothing made ahead is delivered).

    >>> it = iter(data); next(it); s = it.get_state(); next(it)        # doctest: +SKIP
    >>> it.set_state(s)    # the next batch is the second one again   # doctest: +SKIP
    """

    def __init__(
        self, opener: PassOpener, number: int, state: Any, pin_memory: bool, keep_tuples: bool
    ):
        self._opener, self._number = opener, number
        self._inner = opener.open(number, state)
        self._pin = pin_memory
        self._keep_tuples = keep_tuples  # inside a DataLoader that collates the torch way
        self._clock = WaitClock()
        self._state = self._inner.get_state()
        self._fresh = True  # nothing returned since the inner run started

    def __iter__(self) -> TorchIterator:
        return self

    def __next__(self) -> Any:
        batch = self._clock.call(self._inner.__next__)
        self._state = self._inner.get_state()
        self._fresh = False
        out = map_leaves(self._tensor, batch)
        return _kept(out) if self._keep_tuples else out

    def get_state(self) -> dict[str, Any]:
        return copy.deepcopy(self._state)

    def set_state(self, state: Any) -> None:
        """Checked first (a StateError leaves the pass as it was), then the pass restarts there."""
        if self._fresh and state == self._state:
            return  # already starts there (StatefulDataLoader restores the dataset, then this)
        number = self._opener.pass_of(state)
        if number == self._number:
            self._inner.set_state(state if is_worker_state(self._state) else plain_state(state))
        else:  # another pass: its own epochs
            inner = self._opener.open(number, state)
            self._inner.close()
            self._inner, self._number = inner, number
        self._state = self._inner.get_state()
        self._fresh = True

    def start(self) -> None:
        """Begins making the pass's batches before the first `next()` (`DatasetIterator.start`)."""
        self._inner.start()

    def state_dict(self) -> dict[str, Any]:
        """`get_state()`, under torch's name."""
        return self.get_state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """`set_state(state)`, under torch's name."""
        self.set_state(state)

    def stats(self) -> Any:
        """The pass's `PipelineStats` (with `uneven=`: `cut_batches`, `padded_batches`...)."""
        return self._inner.stats()

    @property
    def wait_fraction(self) -> float:
        return self._clock.wait_fraction

    def close(self) -> None:
        self._inner.close()

    def _tensor(self, path: str, leaf: Any) -> Any:
        array = leaf if isinstance(leaf, np.ndarray) else np.asarray(leaf)
        if array.dtype.kind in "OSU":
            return array.tolist()
        tensor = (
            torch.from_numpy(array) if array.flags.writeable else torch.from_numpy(array.copy())
        )
        return tensor.pin_memory() if self._pin else tensor


class KeptTuple(tuple):
    """A tuple on its way through a DataLoader's default collation, which gives it back as a
    plain tuple: torch rebuilds anything with `_fields` (a namedtuple) by calling its type with
    the items, and this type makes a plain tuple of them. (Plain tuples become lists there.)"""

    _fields: tuple[str, ...] = ()

    def __new__(cls, *items: Any) -> Any:
        return tuple(items)


def _kept(tree: Any) -> Any:
    """`tree` with its plain tuples as `KeptTuple`s."""
    if isinstance(tree, dict):
        return {k: _kept(v) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_kept(v) for v in tree]
    if isinstance(tree, tuple):
        items = [_kept(v) for v in tree]
        return type(tree)(*items) if hasattr(tree, "_fields") else tuple.__new__(KeptTuple, items)
    return tree


def _collation(caller: Any) -> tuple[bool, Any] | None:
    """(whether it batches, its collate_fn) of the DataLoader whose fetcher is `caller` (the
    frame that called iter() on the dataset: torch's `_IterableDatasetFetcher.__init__`, in
    the loop's process and in every worker); None when no DataLoader called."""
    fetcher = caller.f_locals.get("self") if caller is not None else None
    if type(fetcher).__name__ != "_IterableDatasetFetcher":
        return None
    return bool(getattr(fetcher, "auto_collation", False)), getattr(fetcher, "collate_fn", None)


def _pinning(requested: bool, in_worker: bool) -> bool:
    if not requested:
        return False
    if in_worker:
        warnings.warn(
            "to_torch(pin_memory=True) pins in the main process only; inside DataLoader "
            "workers pass pin_memory=True to the DataLoader instead",
            stacklevel=3,
        )
        return False
    if not torch.accelerator.is_available():
        warnings.warn(
            "to_torch(pin_memory=True) but no accelerator is available: tensors are not pinned",
            stacklevel=3,
        )
        return False
    return True


def _json_state(state: Any) -> Any:
    """`state` as JSON values (numpy numbers, as a checkpoint library may give them back, as
    Python's), for the pass book; a StateError where it has something else."""

    def number(value: Any) -> Any:
        if isinstance(value, np.generic):
            return value.item()
        raise TypeError(type(value).__name__)

    try:
        return json.loads(json.dumps(state, default=number))
    except (TypeError, ValueError) as e:
        raise StateError(f"iterator state holds a value JSON cannot: {e}") from None
