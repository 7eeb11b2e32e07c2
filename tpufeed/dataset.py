"""Dataset: an immutable, chainable description of an input pipeline.

>>> ds = (Dataset.from_sequence(range(100)).shuffle(seed=0).shard(0, 2)
...       .map(lambda x: {"x": x}).batch(8).repeat(2))
>>> it = iter(ds); batch = next(it); state = it.get_state()
>>> next(ds.iterator(state))["x"].tolist() == next(it)["x"].tolist()
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tpufeed.errors import InvalidArgumentError
from tpufeed.ops.batch import Batch
from tpufeed.ops.filter import Filter
from tpufeed.ops.first_fit import check_lengths
from tpufeed.ops.flat_map import FlatMap
from tpufeed.ops.map import Map, RandomMap
from tpufeed.ops.pack import Pack
from tpufeed.ops.padding import check_pad
from tpufeed.ops.registry import Stage, cache_stage, check_next, stage_label
from tpufeed.ops.user_functions import check_callable
from tpufeed.order.sharding import Sharding
from tpufeed.run.agreement import HostAgreement
from tpufeed.run.autotune import Options, TracePath
from tpufeed.run.element_spec import element_spec
from tpufeed.run.iterator import DatasetIterator
from tpufeed.run.launch import RunSettings, launcher
from tpufeed.run.lookup import element_at
from tpufeed.run.mixture import Mixture, check_component, check_mix
from tpufeed.run.plan import (
    MixPlan,
    Plan,
    check_epochs,
    check_max_errors,
    check_shuffle,
    pipeline_fingerprint,
    pipeline_length,
    pipeline_plan,
)
from tpufeed.run.uneven import first_item
from tpufeed.run.workers.liveness import STOPPED_S
from tpufeed.sources.constructors import SourceConstructors
from tpufeed.sources.view import SourceView

if TYPE_CHECKING:  # the adapters import their frameworks: only type checkers read them here
    from typing_extensions import Self

    from tpufeed.adapters.jax import JaxIterator
    from tpufeed.adapters.torch import TorchIterable


@dataclass(frozen=True)
class Dataset(SourceConstructors):
    """A pipeline: source -> shuffle -> shard -> map/random_map/filter/flat_map -> batch -> repeat.

    Every method returns a new Dataset. Shuffle, shard, repeat and prefetch are settings of the
    whole pipeline; map, random_map, filter, flat_map and batch run in the order they were
    chained (stages after `batch` see whole batches). Batches never span epochs.
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
    ) -> Dataset:
        """Several pipelines as one stream, in the exact proportions of `weights` (default
        equal): after any N elements each component is within 1 of its share (tpufeed.ops.mix).

        Each component keeps its own source, shuffle, epochs and per-element stages; `pack`
        and `batch` after `mix` see the mixture. `on_end`: "restart" a component that ends
        with its next epoch (default), "stop" the mixture, or "drop" the component.

        >>> a = Dataset.from_sequence(["a"] * 6)
        >>> b = Dataset.from_sequence(["b"] * 6)
        >>> "".join(Dataset.mix([a, b], weights=[2, 1], on_end="stop"))
        'aabaabaab'
        """
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
    def source(self) -> Any:
        """The record source underneath (`__len__`, `__getitem__`): usable as a Grain source."""
        return self._view("source").source

    def shuffle(self, seed: int, window: int | None = None) -> Dataset:
        """A fresh permutation of the records each epoch, keyed by `seed`.

        `window=None`: global. `window=K` (file sources): shuffle the shard order, then the
        records within each group of K consecutive shards, so only about K shards are needed at
        once — for datasets larger than the local cache.
        """
        check_shuffle(seed, window, self._view("shuffle").source)
        if self._seed is not None:
            raise InvalidArgumentError(f"shuffle is already set (seed {self._seed})")
        return dataclasses.replace(self, _seed=seed, _window=window)

    def shard(self, index: int | None = None, count: int | None = None) -> Dataset:
        """This host's share; defaults to the run's process index/count (jax's or torch's)."""
        return dataclasses.replace(self, _sharding=Sharding(index, count))

    def map(self, fn: Callable[[Any], Any]) -> Dataset:
        """Applies `fn(element) -> element` to every element (in workers, with `.workers(n)`).
        A transform class is given constructed, `map(DecodeImage())`: the class is refused."""
        return self._add(Map(check_callable(fn, "map")))

    def random_map(self, fn: Callable[[Any, Any], Any], seed: int | None = None) -> Dataset:
        """fn(element, rng) -> element; rng is a numpy Generator fixed by (seed, epoch, record)
        and, after a `flat_map`, by the piece of the record. `seed`: this stage's own (as
        Grain's `random_map(fn, seed=...)`); None: the pipeline's (its shuffle seed, or 0)."""
        stream = sum(isinstance(stage, RandomMap) for stage in self._stages)
        return self._add(RandomMap(check_callable(fn, "random_map"), stream, seed))

    def filter(self, fn: Callable[[Any], bool]) -> Dataset:
        """Keeps the elements for which fn(element) is true."""
        return self._add(Filter(check_callable(fn, "filter")))

    def flat_map(self, fn: Callable[[Any], Any]) -> Dataset:
        """fn(element) -> an iterable of zero or more elements, delivered in order: the pieces
        of a long document, several crops of an image. A state taken between two pieces of one
        record resumes at the next piece.

        >>> ds = Dataset.from_sequence(["a b", "c"]).flat_map(str.split)
        >>> list(ds)
        ['a', 'b', 'c']
        """
        return self._add(FlatMap(check_callable(fn, "flat_map")))

    def cache(self, directory: str, max_bytes: int, key: str | None = None) -> Dataset:
        """Stores each record's output of the stages so far in `directory` (at most `max_bytes`)
        and replays it in later epochs, keyed by the source's files and what the stages compute
        (their code and the values it reads), or by `key="v2"` instead (docs/images.md)."""
        return self._add(cache_stage(directory, max_bytes, self._view("cache"), self._stages, key))

    def pack(self, lengths: dict[str, int], open_rows: int = 16, cut: bool = False) -> Dataset:
        """Packs sequences into rows of fixed length, first-fit over `open_rows` open rows.

        Each key k of `lengths` gives `k`, `k_segment_ids` (1, 2, ... per sequence in the
        row, 0 on padding) and `k_positions` (restarting at every sequence); keys packed
        together (inputs and targets) share rows. A sequence longer than its row is split over
        rows (`cut=True` keeps only its first row's worth). With `batch(B)` after it, every step
        is `[B, length]`, the epoch's last batch filled with empty rows (`stats().padded_rows`).

        >>> ds = Dataset.from_sequence([{"tokens": [5, 6, 7]}, {"tokens": [8, 9]}])
        >>> next(iter(ds.pack({"tokens": 4}).batch(2)))["tokens_segment_ids"].tolist()
        [[1, 1, 1, 0], [1, 1, 0, 0]]
        """
        return self._add(Pack(check_lengths(lengths, open_rows), open_rows, bool(cut)))

    def batch(
        self,
        batch_size: int,
        drop_remainder: bool = False,
        pad: dict[str, int | list[int]] | None = None,
        cut: bool = False,
    ) -> Dataset:
        """Stacks `batch_size` elements into numpy arrays (dicts, tuples and arrays nest).

        `pad={"tokens": 512}` pads a variable-length key to 512 along its first axis;
        `pad={"tokens": [128, 256, 512]}` to the smallest of those that fits the batch's
        longest. Each padded key gains `{key}_lengths` (int32, the true lengths). An element
        longer than the largest length raises, unless `cut=True`. Strings and other objects
        stack into object arrays; callables are refused (`BatchError`).

        >>> ds = Dataset.from_sequence([{"t": [1, 2]}, {"t": [3]}])
        >>> next(iter(ds.batch(2, pad={"t": [4, 8]})))["t"].tolist()
        [[1, 2, 0, 0], [3, 0, 0, 0]]
        """
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise InvalidArgumentError(f"batch_size must be a positive int, got {batch_size!r}")
        return self._add(Batch(batch_size, bool(drop_remainder), check_pad(pad), bool(cut)))

    def repeat(self, epochs: int | None = None) -> Dataset:
        """Runs `epochs` epochs (None: forever), each a new permutation when shuffled."""
        self._not_mixture("repeat")
        check_epochs(epochs)
        return dataclasses.replace(self, _epochs=epochs)

    def prefetch(self, n: int | str) -> Dataset:
        """Keeps up to `n` items ready ahead of the consumer (0: produce on demand).

        `"auto"`: chosen from a short warm-up within the RAM budget, and deepened while the
        consumer keeps waiting.
        """
        return self._set(prefetch=n)

    def options(
        self,
        ram_budget_bytes: int | None = None,
        timeout_s: float | None = None,
        stopped_s: float | None = STOPPED_S,
        shm_budget_bytes: int | None = None,
        log_every_s: float | None = None,
        trace: TracePath = None,
    ) -> Dataset:
        """Pipeline-wide settings. `ram_budget_bytes` bounds what "auto" settings may use.

        `timeout_s`: `next()` waits at most this long for an item, then raises
        `InputTimeoutError` naming the stage and the record being worked on, and stops the
        workers. It watches reading and the element stages (and the batch stages workers run);
        to be able to stop them, no chunk runs in the calling thread (a prefetch thread with no
        workers, only workers with some). Off by default; not for `mix`.

        `stopped_s`: a stopped worker (SIGSTOP, SIGTSTP) or fork server is waited for this long
        (default 10 s; None: until it continues), then raises `WorkerError` naming it.
        `shm_budget_bytes`: the most /dev/shm the workers' batches hold at once, split evenly
        between them (default: half its free space); a batch over a share raises `WorkerError`.
        Every wait and its bound: docs/faults.md. `log_every_s`: a line on the `tpufeed` logger
        this often: rate, wait, bottleneck, cache hits (default: never; docs/metrics.md).
        `trace`: a file each iterator writes its timeline to (`tpufeed.trace`; docs/timeline.md).
        """
        settings = (ram_budget_bytes, timeout_s, stopped_s, shm_budget_bytes, log_every_s, trace)
        return self._set(options=Options(*settings))

    def ignore_errors(self, max_errors: int) -> Dataset:
        """Skips records whose read or transform fails, at most `max_errors` per iterator.

        Each skip is counted (`it.stats().errors`). The first three are logged with their file,
        record and cause, then one summary line at 10, 100, ... skips. The bad record after the
        last allowed one raises. Off by default: errors raise.
        """
        self._not_mixture("ignore_errors")
        check_max_errors(max_errors)
        return dataclasses.replace(self, _max_errors=max_errors)

    def workers(self, n: int | str, isolate: bool = False) -> Dataset:
        """Runs the element and batch stages in `n` worker processes (0: in this process).

        The output is the same item for item whatever `n`; functions may be lambdas or closures.
        `"auto"`: chosen from a short measured warm-up within the RAM budget (`options`).
        While workers start, the first chunks run in this process, for a fast first batch;
        `isolate=True` runs none here, so a crash in native code (a segfault in a decoder) can
        only take a worker down, at the cost of a first batch that waits for a worker to start
        (with a number of workers: "auto" measures its warm-up here).

        Asking for workers starts the process they are forked from (one per process, in the
        background, ~0.5 s of one core to import numpy and tpufeed), so that by the time the
        first batch is asked for (after the model is built and compiled) workers start in
        milliseconds. `TPUFEED_FORKSERVER=0` starts each worker as a fresh interpreter instead.
        """
        workers = self._set(workers=n, isolate=isolate)  # checks n and isolate
        if n:
            from tpufeed.run.workers.forkserver import shared_server

            shared_server()  # returns at once: its imports run while the caller goes on
        return workers

    def __iter__(self) -> DatasetIterator:
        return self.iterator()

    def __bool__(self) -> bool:
        return True  # a Dataset is a description: truthy, whatever len() would say

    def __getitem__(self, index: int) -> Any:
        """The element at position `index` of this host's stream, as iteration makes it (None
        where a filter drops it): for map, random_map and filter (`tpufeed.run.lookup`)."""
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
        self, state: Any = None, uneven: str | None = None, agreement: HostAgreement | None = None
    ) -> DatasetIterator:
        """A new iterator, from the start or resuming right after `state` was taken.

        `state` is one `get_state()`, or the list of every host's, taken at one step of a run.
        One state continues on the host that took it, and on any host of a run whose hosts
        were in lockstep (counts that cannot depend on the data). The list of all hosts'
        states continues on any host count, exactly once, whatever the stages.

        `uneven="shortest"` or `"pad"` ends all hosts' epochs at one step (tpufeed.run.uneven),
        agreeing through `agreement` (default: jax's or torch's). `to_jax` does this itself.
        """
        launch = launcher(self._plan(), self._settings, uneven, agreement, self._first_item)
        return DatasetIterator(launch, state, self._settings.options.trace)

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
        return pipeline_fingerprint(source, self._seed, self._window, self._stages)

    def _first_item(self) -> Any:
        """The first item of a one-host pass: what a host that made nothing pads from."""
        one_host = dataclasses.replace(self, _sharding=Sharding(0, 1), _epochs=1)
        return first_item(dataclasses.replace(one_host, _settings=RunSettings()))

    def _not_mixture(self, what: str) -> None:
        if self._mixture is not None:
            raise InvalidArgumentError(
                f"{what} belongs to each component of a mixture, not to the mixture: "
                "set it on the datasets given to Dataset.mix"
            )

    def _view(self, what: str) -> SourceView:
        """The source underneath, which `what` needs; a mixture has none of its own."""
        self._not_mixture(what)
        if self._source is None:
            raise InvalidArgumentError(f"{what} needs a source, and this Dataset has none")
        return self._source

    def _plan(self) -> Plan | MixPlan:
        host, hosts = self._sharding.resolve()
        if self._mixture is not None:
            return self._mixture.plan(
                host, hosts, self._settings.workers, self._stages, self.fingerprint()
            )
        source, stages = self._view("a plan"), self._stages
        return pipeline_plan(
            source, self._seed, self._window, stages, self._epochs, self._max_errors, host, hosts
        )

    def _add(self, stage: Stage) -> Dataset:
        check_next(self._stages, stage)
        return dataclasses.replace(self, _stages=self._stages + (stage,))

    def _set(self, **settings: Any) -> Dataset:
        return dataclasses.replace(self, _settings=dataclasses.replace(self._settings, **settings))

    def __repr__(self) -> str:
        if self._mixture is not None:
            return self._mixture.summary(self._stages)
        stages = ", ".join(map(stage_label, self._stages))
        return (
            f"Dataset({self._view('repr').source!r}, seed={self._seed}, window={self._window}, "
            f"shard={self._sharding}, stages=[{stages}], epochs={self._epochs}, "
            f"prefetch={self._settings.prefetch}, workers={self._settings.workers})"
        )
