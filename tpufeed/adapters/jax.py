"""`Dataset.to_jax`: global, correctly sharded `jax.Array` batches, transferred ahead of the loop.

Each process feeds its own share (`Dataset.shard()` defaults to `jax.process_index()` of
`jax.process_count()`); its local batch becomes its part of one global array.

>>> it = ds.shuffle(0).shard().batch(64, drop_remainder=True).to_jax()   # doctest: +SKIP
>>> for batch in it: state = train_step(state, batch)                   # doctest: +SKIP
>>> saved = it.get_state()        # the input position: save it with the model  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Iterator
from typing import Any

import jax
from jax.sharding import NamedSharding

from tpufeed.adapters._jax_layout import BatchLayout, check_sharding, data_parallel_sharding
from tpufeed.adapters._wait_clock import WaitClock
from tpufeed.errors import InvalidArgumentError
from tpufeed.observe import profiler
from tpufeed.ops.base import StageClock, now
from tpufeed.run.hosts.agreement import HostAgreement
from tpufeed.run.hosts.uneven import check_uneven
from tpufeed.run.iterator import DatasetIterator
from tpufeed.run.prefetch import ThreadPrefetcher
from tpufeed.run.state_names import TorchStateNames
from tpufeed.run.stats import PipelineStats, StageStats

__all__ = ["JaxIterator", "data_parallel_sharding", "to_jax"]


def to_jax(
    ds: Any,
    sharding: NamedSharding | None = None,
    prefetch: int = 2,
    state: Any = None,
    uneven: str = "shortest",
    agreement: HostAgreement | None = None,
) -> JaxIterator:
    """Iterates `ds` as pytrees of global jax.Arrays placed by `sharding`.

    sharding: a NamedSharding applied to every leaf; None is a 1-D mesh over all devices of all
      processes with the batch dimension split along it (`data_parallel_sharding()`).
    prefetch: batches transferred to the devices ahead of the loop, by a background thread
      (0: transfer in `__next__`).
    state: a `get_state()` to resume from, or the list of every process's, as for
      `Dataset.iterator`.
    uneven: when processes make different numbers of batches (a filter, flat_map,
      ignore_errors, an uneven last shard), every process still ends each epoch at the same
      step: "shortest" (default) drops the longer processes' extra batches, "pad" hands out
      fully masked batches (every batch gains a boolean `mask` leaf; short batches are padded
      to full size). See tpufeed.run.hosts.uneven. In one process, "shortest" changes nothing.
    agreement: how processes agree at each step (default: jax.distributed's coordination
      service, used only where counts can differ).
    """
    if not isinstance(prefetch, int) or isinstance(prefetch, bool) or prefetch < 0:
        raise InvalidArgumentError(f"to_jax prefetch must be a non-negative int, got {prefetch!r}")
    if check_uneven(uneven) is None:
        raise InvalidArgumentError(
            "to_jax needs uneven='shortest' or 'pad': a process that runs "
            "out of batches early would stall the others"
        )
    return JaxIterator(ds, check_sharding(sharding), prefetch, state, uneven, agreement)


class JaxIterator(TorchStateNames, Iterator[Any]):
    """Batches already on the devices. `get_state()` (= `state_dict()`) counts only batches
    `__next__` returned, never the ones still waiting in the prefetch buffer; `wait_fraction`
    says how much of the loop's time went to waiting for them."""

    def __init__(
        self,
        ds: Any,
        sharding: NamedSharding,
        prefetch: int,
        state: Any = None,
        uneven: str = "shortest",
        agreement: HostAgreement | None = None,
    ):
        self._ds = ds
        self.sharding = sharding
        self._prefetch = prefetch
        self._uneven, self._agreement = uneven, agreement
        self._clock = WaitClock()
        self._closed = True
        self._start(state)

    def _start(self, state: Any) -> None:
        self._inner = self._ds.iterator(state, uneven=self._uneven, agreement=self._agreement)
        self._state = self._inner.get_state()
        self._device_clock = StageClock()
        self._transfer()

    def _transfer(self) -> None:
        """Starts moving batches from the pipeline to the devices, `prefetch` ahead."""
        items = _transferred(self._inner, BatchLayout(self.sharding), self._device_clock)
        self._items: Generator[tuple[Any, dict], None, None] = items
        self._prefetcher = (
            ThreadPrefetcher(items, self._prefetch, "tpufeed to_device") if self._prefetch else None
        )
        self._closed = False

    def _stop_transfer(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.close()
        else:
            self._items.close()

    def __iter__(self) -> JaxIterator:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        source = self._prefetcher.get if self._prefetcher is not None else self._items.__next__
        spans = profiler.check()  # the one check per batch: does a profiler record?
        if spans is None:
            arrays, self._state = self._clock.call(source)
        else:
            with spans("next", "wait"):
                arrays, self._state = self._clock.call(source)
        return arrays

    def start(self) -> None:
        """Begins making batches before the first `next()` (`DatasetIterator.start`): with
        `prefetch` > 0 the transfer thread already does, from the iterator's start and after
        each `set_state`; with `prefetch=0` the pipeline begins its first batch."""
        if not self._closed and self._prefetcher is None:
            self._inner.start()

    def get_state(self) -> dict[str, Any]:
        """The input position after the last batch the loop received; small and JSON-able."""
        return dict(self._state)

    def set_state(self, state: Any) -> None:
        """Continues right after `state` (one process's, or the list of all processes' for
        another process count); the batches prefetched so far are dropped. A state that does
        not fit raises StateError and leaves the iterator where it was."""
        if not self._closed:
            self._stop_transfer()
        try:
            self._inner.set_state(state)
        except BaseException:
            self._inner.set_state(self._state)  # back to the last batch handed out
            raise
        finally:
            self._state = self._inner.get_state()
            self._transfer()

    def stats(self) -> PipelineStats:
        """The pipeline's statistics plus the transfer to the devices ("to_device") and the
        training loop's own wait for batches (`wait_fraction` as this iterator measures it)."""
        inner = self._inner.stats()
        stages = dict(inner.stages)
        for name, seconds in list(self._device_clock.seconds.items()):
            stages[name] = StageStats(seconds, self._device_clock.records[name], 1)
        return dataclasses.replace(
            inner,
            stages=stages,
            wait_seconds=self._clock.wait_seconds,
            wall_seconds=self._clock.wall_seconds or inner.wall_seconds,
        )

    @property
    def wait_fraction(self) -> float:
        """Share of the loop's wall time spent blocked in `__next__`, counted from the second
        batch on (start-up and the first step, where jit compiles, are left out)."""
        return self._clock.wait_fraction

    @property
    def wait_seconds(self) -> float:
        """Seconds blocked in `__next__` inside the window of `wait_fraction`."""
        return self._clock.wait_seconds

    @property
    def wall_seconds(self) -> float:
        """Wall time of the window of `wait_fraction`."""
        return self._clock.wall_seconds

    @property
    def window_batches(self) -> int:
        """Batches handed over inside that window: with `wall_seconds`, the steady rate."""
        return self._clock.window_batches

    @property
    def time_to_first_batch(self) -> float | None:
        return self._clock.time_to_first_batch

    @property
    def dropped_records(self) -> int:
        return self._inner.dropped_records

    def close(self) -> None:
        """Stops the transfer thread and the pipeline. Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        self._stop_transfer()
        self._inner.close()

    def __enter__(self) -> JaxIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _transferred(
    inner: DatasetIterator, layout: BatchLayout, clock: StageClock
) -> Generator[tuple[Any, dict], None, None]:
    """(global arrays, state after them), the arrays ready on their devices; the transfer is
    timed as the "to_device" stage."""
    for index, batch in enumerate(inner):
        state = inner.get_state()
        started = now()
        with profiler.span("to_device", on_timeline=False):  # the clock puts it there
            arrays = jax.block_until_ready(layout.place(batch, index))
        clock.add("to_device", now() - started, _leading_dim(batch))
        yield arrays, state


def _leading_dim(batch: Any) -> int:
    leaves = jax.tree_util.tree_leaves(batch)
    if not leaves or not getattr(leaves[0], "ndim", 0):
        return 1
    return len(leaves[0])
