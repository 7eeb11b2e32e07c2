"""`Dataset.to_torch`: an `IterableDataset` yielding batches of torch tensors.

Hand it to `DataLoader(..., batch_size=None)`: tpufeed batches already. With `num_workers=W`
each DataLoader worker reads the disjoint share `host * W + worker` of `hosts * W`, so no record
is delivered twice; tpufeed's own `.workers(n)` is the cheaper way to parallelise transforms.
Workers started by fork are safe after the parent has read: open files are reopened in each
worker, and ArrayRecord files are read through a helper process (see `sources._reader_process`).
Numeric leaves become tensors (sharing memory with the batch); bytes and str leaves become
lists, as torch's default collation makes them.

>>> loader = DataLoader(ds.batch(32).to_torch(), batch_size=None)          # doctest: +SKIP
>>> for batch in loader: ...                                               # doctest: +SKIP
>>> saved = loader.dataset.state_dict()    # with num_workers=0: what the loop received
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from tpufeed.adapters._leaves import map_leaves
from tpufeed.adapters._wait_clock import WaitClock
from tpufeed.errors import StateError, missing_dependency
from tpufeed.state import state_from_dict

try:
    import torch
    from torch.utils.data import IterableDataset, get_worker_info
except ImportError:  # pragma: no cover - the adapter is only imported through to_torch
    raise missing_dependency("torch", "torch") from None

__all__ = ["TorchIterable", "TorchIterator", "to_torch"]


def to_torch(ds: Any, pin_memory: bool = False) -> TorchIterable:
    """An IterableDataset over `ds`; `pin_memory` pins tensors for fast copies to an accelerator."""
    return TorchIterable(ds, pin_memory=pin_memory)


class TorchIterable(IterableDataset):
    """Each `iter()` is a pass from the start, or from the state given to `load_state_dict`.

    `state_dict()` describes the pass running in this process: with `num_workers=0` that is
    exactly what the loop received. Inside DataLoader workers each worker has its own state
    (torchdata's StatefulDataLoader collects them per worker through these same methods).
    """

    def __init__(self, ds: Any, pin_memory: bool = False):
        # Resolved here, in the main process: a `.shard()` default asks jax, and importing jax
        # in a DataLoader worker forked from a process that imported torch crashes it.
        self._host, self._hosts = ds._sharding.resolve()
        self._ds = ds.shard(self._host, self._hosts)
        self._pin_memory = bool(pin_memory)
        self._pending: dict[str, Any] | None = None
        self._iterator: TorchIterator | None = None

    def __iter__(self) -> TorchIterator:
        ds, in_worker = self._ds, False
        info = get_worker_info()
        if info is not None:
            in_worker = True
            if info.num_workers > 1:
                workers = info.num_workers
                ds = ds.shard(self._host * workers + info.id, self._hosts * workers)
        state, self._pending = self._pending, None
        self._iterator = TorchIterator(ds.iterator(state), _pinning(self._pin_memory, in_worker))
        return self._iterator

    def state_dict(self) -> dict[str, Any]:
        """The position of the running (or last) pass; before any pass, where the next starts."""
        if self._pending is not None:
            return dict(self._pending)
        if self._iterator is not None:
            return self._iterator.get_state()
        it = self._ds.iterator()
        try:
            return it.get_state()
        finally:
            it.close()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The next `iter()` continues right after `state` (from any host count, in lockstep)."""
        if not isinstance(state, dict):
            raise StateError(f"load_state_dict needs a dict from state_dict(), got {type(state).__name__}")
        state_from_dict(state, self._ds.fingerprint())  # fails now rather than at the next iter()
        self._pending = dict(state)

    @property
    def wait_fraction(self) -> float:
        """Of the current pass in this process: time blocked on input / wall time."""
        return self._iterator.wait_fraction if self._iterator is not None else 0.0


class TorchIterator(Iterator[Any]):
    """One pass: batches as tensors; `get_state()` counts the batches returned so far."""

    def __init__(self, inner: Any, pin_memory: bool):
        self._inner = inner
        self._pin = pin_memory
        self._clock = WaitClock()
        self._state = inner.get_state()

    def __iter__(self) -> TorchIterator:
        return self

    def __next__(self) -> Any:
        batch = self._clock.call(self._inner.__next__)
        self._state = self._inner.get_state()
        return map_leaves(self._tensor, batch)

    def get_state(self) -> dict[str, Any]:
        return dict(self._state)

    @property
    def wait_fraction(self) -> float:
        return self._clock.wait_fraction

    def close(self) -> None:
        self._inner.close()

    def _tensor(self, path: str, leaf: Any) -> Any:
        array = leaf if isinstance(leaf, np.ndarray) else np.asarray(leaf)
        if array.dtype.kind in "OSU":
            return array.tolist()
        tensor = torch.from_numpy(array) if array.flags.writeable else torch.from_numpy(array.copy())
        return tensor.pin_memory() if self._pin else tensor


def _pinning(requested: bool, in_worker: bool) -> bool:
    if not requested:
        return False
    if in_worker:
        warnings.warn("to_torch(pin_memory=True) pins in the main process only; inside DataLoader "
                      "workers pass pin_memory=True to the DataLoader instead", stacklevel=3)
        return False
    if not torch.accelerator.is_available():
        warnings.warn("to_torch(pin_memory=True) but no accelerator is available: tensors are "
                      "not pinned", stacklevel=3)
        return False
    return True
