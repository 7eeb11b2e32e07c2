"""Dataset: an immutable, chainable description of an input pipeline.

>>> ds = (Dataset.from_sequence(range(100)).shuffle(seed=0).shard(0, 2)
...       .map(lambda x: {"x": x}).batch(8).repeat(2))
>>> it = iter(ds); batch = next(it); state = it.get_state()
>>> next(ds.iterator(state))["x"].tolist() == next(it)["x"].tolist()
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

from tpufeed.chain.base import SourceName
from tpufeed.chain.mix_epochs import epoch_weights
from tpufeed.chain.order import OrderMethods
from tpufeed.chain.settings import SettingMethods
from tpufeed.chain.stages import StageMethods
from tpufeed.errors import InvalidArgumentError
from tpufeed.ops.registry import Stage, stage_label
from tpufeed.order.sharding import Sharding
from tpufeed.order.slicing import WHOLE, Slicing
from tpufeed.run.element_spec import element_spec
from tpufeed.run.hosts.agreement import HostAgreement
from tpufeed.run.hosts.uneven import first_item
from tpufeed.run.iterator import DatasetIterator
from tpufeed.run.launch import RunSettings, launcher
from tpufeed.run.lookup import element_at
from tpufeed.run.mixture import Mixture, check_component, check_mix
from tpufeed.run.plan import (
    MixPlan,
    Plan,
    pipeline_fingerprint,
    pipeline_length,
    pipeline_plan,
)
from tpufeed.sources.built.statistics import DatasetStatistics
from tpufeed.sources.constructors import SourceConstructors
from tpufeed.sources.view import SourceView

if TYPE_CHECKING:  # the adapters import their frameworks: only type checkers read them here
    from typing_extensions import Self

    from tpufeed.adapters.jax import JaxIterator
    from tpufeed.adapters.torch import TorchIterable


@dataclass(frozen=True)
class Dataset(SourceConstructors, OrderMethods, StageMethods, SettingMethods):
    """A pipeline: source -> shuffle -> shard -> map/random_map/filter/flat_map -> batch -> repeat.

    Every method returns a new Dataset. Shuffle, shard, repeat and prefetch are settings of the
    whole pipeline; map, random_map, filter, flat_map and batch run in the order they were
    chained (stages after `batch` see whole batches). Batches never span epochs.

    The chainable methods come from `tpufeed.chain` (order, stages, settings), the `from_*`
    constructors from `tpufeed.sources.constructors`.
    """

    _source: SourceView | None
    _seed: int | None = None
    _window: int | None = None
    _sharding: Sharding = Sharding(0, 1)
    _stages: tuple[Stage, ...] = ()
    _epochs: int | None = 1
    _max_errors: int = 0
    _settings: RunSettings = RunSettings()  # workers, prefetch, options: where chunks run
    _mixture: Mixture | None = None
    _slicing: Slicing = WHOLE  # slice, take, skip: the records and positions each epoch reads

    @classmethod
    def _over(cls, source: SourceView) -> Self:
        return cls(source)

    @classmethod
    def mix(
        cls,
        datasets: Sequence[Dataset],
        weights: Sequence[float] | None = None,
        seed: int = 0,
        on_end: str = "restart",
        epochs: Sequence[float] | None = None,
    ) -> Dataset:
        """Several pipelines as one stream, in the exact proportions of `weights` (default
        equal): after any N elements each component is within 1 of its share (tpufeed.ops.mix).
        `epochs=[1, 2]` states them in epochs instead: each weight is the component's records
        per epoch times its epochs (tpufeed.chain.mix_epochs), so one pass reads the first
        once and the second twice (with `on_end="stop"`, give the second `repeat(2)`).

        Each component keeps its own source, shuffle, epochs and per-element stages; `pack`
        and `batch` after `mix` see the mixture. `on_end`: "restart" a component that ends
        with its next epoch (default), "stop" the mixture, or "drop" the component.

        >>> a = Dataset.from_sequence(["a"] * 6)
        >>> b = Dataset.from_sequence(["b"] * 6)
        >>> "".join(Dataset.mix([a, b], weights=[2, 1], on_end="stop"))
        'aabaabaab'
        """
        if epochs is not None:
            if weights is not None:
                raise InvalidArgumentError("mix takes weights= or epochs=, not both")
            weights = epoch_weights(datasets, epochs)
        checked, on_end = check_mix(datasets, weights, seed, on_end)
        for i, ds in enumerate(datasets):
            if not isinstance(ds, Dataset) or ds._mixture is not None:
                raise InvalidArgumentError(
                    f"mix component {i} must be a Dataset (not a mixture), got {ds!r}"
                )
            check_component(i, ds._stages, ds._sharding != Sharding(0, 1), ds._settings)
        return cls(None, _mixture=Mixture(tuple(datasets), checked, seed, on_end))

    @property
    def schema(self) -> dict[str, Any] | None:
        """The manifest's inferred schema for datasets from `Dataset.open`, else None."""
        return None if self._source is None else getattr(self._source.source, "schema", None)

    @property
    def statistics(self) -> DatasetStatistics:
        """What the build counted while writing a dataset of `Dataset.open`: per field, per
        input file, record sizes (tpufeed.sources.built.statistics); `recorded` is False, and
        `why` says why, for other sources and datasets built before statistics."""
        found = None if self._source is None else getattr(self._source.source, "statistics", None)
        if isinstance(found, DatasetStatistics):
            return found
        return DatasetStatistics.none("not a dataset written by tpufeed build or WriteShards")

    source = SourceName()
    """The record source underneath (`__len__`, `__getitem__`): usable as a Grain source.

    On the class, `tpufeed.Dataset.source(x)` is `from_source(x)`, as Grain's
    `MapDataset.source(x)`: any object with `__len__` and `__getitem__(int)`, a list too.

    >>> ds = Dataset.source([10, 20, 30])
    >>> list(ds), ds.source
    ([10, 20, 30], [10, 20, 30])
    """

    def __iter__(self) -> DatasetIterator:
        return self.iterator()

    def __bool__(self) -> bool:
        return True  # a Dataset is a description: truthy, whatever len() would say

    @overload
    def __getitem__(self, index: slice) -> Dataset: ...

    @overload
    def __getitem__(self, index: int) -> Any: ...

    def __getitem__(self, index: int | slice) -> Any:
        """The element at position `index` of this host's stream, as iteration makes it (None
        where a filter drops it): for map, random_map and filter (`tpufeed.run.lookup`).
        `ds[a:b:c]` is `ds.slice(slice(a, b, c))`, as in Grain."""
        if isinstance(index, slice):
            return self.slice(index)
        return element_at(self._plan(), index)

    @property
    def element_spec(self) -> Any:
        """Each item's structure, a `TensorSpec` (shape, dtype) per leaf, as in tf.data; from the
        first record, functions run on one element (`sampled=True`): `tpufeed.run.element_spec`."""
        return element_spec(self._plan())

    def __len__(self) -> int:
        """Items this host's pipeline yields, every epoch counted (`repeat(0)`: 0); else an
        `UnknownLengthError` (a TypeError) naming `repeat()` or the stages deciding it."""
        return pipeline_length(self._plan())

    def iterator(
        self,
        state: Any = None,
        uneven: str | None = None,
        agreement: HostAgreement | None = None,
        allow_new_weights: bool = False,
    ) -> DatasetIterator:
        """A new iterator, from the start or resuming right after `state` was taken.

        `state` is one `get_state()`, or the list of every host's, taken at one step of a run.
        One state continues on the host that took it, and on any host of a run whose hosts
        were in lockstep (counts that cannot depend on the data). The list of all hosts'
        states continues on any host count, exactly once, whatever the stages.

        `uneven="shortest"` or `"pad"` ends all hosts' epochs at one step
        (tpufeed.run.hosts.uneven), agreeing through `agreement` (default: jax's or torch's).
        `to_jax` does this itself.

        `allow_new_weights=True`: a state of this mixture taken with other weights (the same
        components, seed and stages after mix) continues with these weights from here, each
        component exactly where it stood: changing the data mix mid-run.
        """
        launch = launcher(self._plan(), self._settings, uneven, agreement, self._first_item)
        trace = self._settings.options.trace
        return DatasetIterator(launch, state, trace, allow_new_weights)

    def to_jax(
        self,
        sharding: Any = None,
        prefetch: int = 2,
        state: Any = None,
        uneven: str = "shortest",
        agreement: HostAgreement | None = None,
    ) -> JaxIterator:
        """Iterates pytrees of global `jax.Array`s placed by `sharding`, `prefetch` ahead on
        device, from the start or right after `state` (one `get_state()`, or every process's).
        Every process ends each epoch at the same step (`uneven`: "shortest" or "pad")."""
        from tpufeed.adapters.jax import to_jax

        return to_jax(self, sharding, prefetch, state, uneven, agreement)

    def to_tf(self, state: dict[str, Any] | None = None) -> Any:
        """A `tf.data.Dataset` over this pipeline (spec: `element_spec`); each pass the next epoch."""
        from tpufeed.adapters.tf import to_tf

        return to_tf(self, state=state)

    def to_torch(
        self, pin_memory: bool = False, uneven: str | None = None, agreement: Any = None
    ) -> TorchIterable:
        """A torch `IterableDataset` of tensors; `uneven`, `agreement` as in `iterator`."""
        from tpufeed.adapters.torch import to_torch

        return to_torch(self, pin_memory=pin_memory, uneven=uneven, agreement=agreement)

    def fingerprint(self) -> str:
        """Identifies source, shuffle seed and stages; states only restore into a match."""
        if self._mixture is not None:
            return self._mixture.fingerprint(self._stages)
        source = self._view("fingerprint")
        return pipeline_fingerprint(source, self._seed, self._window, self._stages, self._slicing)

    def _first_item(self) -> Any:
        """The first item of a one-host pass: what a host that made nothing pads from."""
        one_host = dataclasses.replace(self, _sharding=Sharding(0, 1), _epochs=1)
        return first_item(dataclasses.replace(one_host, _settings=RunSettings()))

    def _plan(self) -> Plan | MixPlan:
        host, hosts = self._sharding.resolve()
        if self._mixture is not None:
            return self._mixture.plan(
                host, hosts, self._settings.workers, self._stages, self.fingerprint()
            )
        source, stages, epochs = self._view("a plan"), self._stages, self._epochs
        return pipeline_plan(
            source,
            self._seed,
            self._window,
            stages,
            epochs,
            self._max_errors,
            host,
            hosts,
            self._slicing,
        )

    def _replace(self, **changes: Any) -> Dataset:
        return dataclasses.replace(self, **changes)

    def __repr__(self) -> str:
        if self._mixture is not None:
            return self._mixture.summary(self._stages)
        stages = ", ".join(map(stage_label, self._stages))
        cut = "" if self._slicing == WHOLE else f"{self._slicing}, "
        return (
            f"Dataset({self._view('repr').source!r}, {cut}seed={self._seed}, window={self._window}, "
            f"shard={self._sharding}, stages=[{stages}], epochs={self._epochs}, "
            f"prefetch={self._settings.prefetch}, workers={self._settings.workers})"
        )
